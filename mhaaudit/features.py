"""The streaming reduction: from (B, n, d) token batches to what the checks need.

The full (T, n, d) activations are never held. Per batch we keep the query vectors and the
Assumption 3 vectors (query + mean of the context rows, the query row included) and the exact
per-example rank statistics of the context matrices for Assumption 2. Memory is O(T d).
A ``FeatureSet`` can be saved and audited again later without the model. Under ``torchrun`` each
rank reduces the batches dealt to it and :meth:`StreamingReducer.result` gathers the rows of all
ranks back into single-process order.
"""

from __future__ import annotations

import json
import math
import operator
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import phases, validate
from .contexts import (
    ContextRankResult,
    ContextRanks,
    assumption_2_from_arrays,
    real_tensor,
)
from .errors import InputError, ModelError, OutputError, Param
from .feature_files import refuse_unless_fits, safetensors_header
from .files import folder_files, native_name, read_json, regular_file
from .numerics import RankRule
from .numerics.pow2 import max_abs
from .provenance import stamp
from .runtime import MAX_INT64
from .staging import atomic_path, make_output_folder, staged_outputs

FEATURES_FILE = "features.safetensors"
META_FILE = "meta.json"
# The per-example Assumption 2 statistics a saved folder holds (see ContextRanks.arrays).
_CONTEXT_ARRAYS = ("context_rank", "context_sigma_min", "context_sigma_max", "context_tol")


@dataclass(repr=False)
class FeatureSet:
    """Reduced features of T examples at one probe point."""

    queries: torch.Tensor  # (T, d), the activations' dtype
    a3: torch.Tensor  # (T, d): query + mean of the n context rows
    context: dict[str, torch.Tensor]  # per-example Assumption 2 statistics (see ContextRanks.arrays)
    n: int
    d: int
    query_index: int
    meta: dict = field(default_factory=dict)

    @property
    def T(self) -> int:
        """The number of examples (rows of ``queries``)."""
        return int(self.queries.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the features (the activations' own), which sets the default rank tolerance."""
        return self.queries.dtype

    def __repr__(self) -> str:
        m = self.meta
        where = " ".join(str(m[k]) for k in ("model", "variant") if m.get(k)) + (
            f" layer {m['layer']}" if "layer" in m else ""
        )
        return (
            f"<FeatureSet {where + ': ' if where else ''}T = {self.T}, n = {self.n}, d = {self.d}, "
            f"{str(self.dtype).replace('torch.', '')}, query token {self.query_index}>"
        )

    def rule(self, rtol: float | None = None, atol: float | None = None) -> RankRule:
        """The rank rule for these features' dtype, with ``rtol`` / ``atol`` in place of its defaults when given."""
        return RankRule.for_dtype(self.dtype, rtol=rtol, atol=atol)

    def checked(self) -> FeatureSet:
        """This feature set, after checking that its fields agree as :meth:`save` writes them: n, d and
        ``query_index`` integers in range, ``queries`` and ``a3`` T x d tensors, the context statistics one
        value per example.

        Raises:
            InputError: naming the first field that disagrees.
        """
        self._fields()
        return self

    def _fields(self) -> tuple[int, int, int]:
        """(n, d, query_index) as :meth:`save` writes them (plain ints; a query index counted from the end taken
        from the start), once :meth:`checked`'s checks pass."""
        meta = {k: _index(v) for k, v in (("n", self.n), ("d", self.d), ("query_index", self.query_index))}
        n, qi = meta["n"], meta["query_index"]
        if isinstance(n, int) and isinstance(qi, int) and -n <= qi < 0:
            meta["query_index"] = qi % n  # counted from the end, as reduce_tokens takes it
        tensors = {"queries": self.queries, "a3": self.a3, **(self.context if isinstance(self.context, dict) else {})}
        return _check_saved("the FeatureSet is", meta, tensors, files=("it", "it"))

    def assumption_2(self, rule: RankRule) -> ContextRankResult:
        """Assumption 2 (full-rank n x d context matrices) from the per-example statistics, which were decided under
        one rule when the tokens were reduced: "unavailable" under another (``contexts.assumption_2_from_arrays``),
        and without them (a :class:`StreamingReducer` with ``contexts=False``)."""
        return assumption_2_from_arrays(self.context, n=self.n, d=self.d, rule=rule, examples=self.T)

    def save(self, folder: str | Path) -> Path:
        """Write ``features.safetensors`` and ``meta.json`` into ``folder``: both or, on any failure, neither.

        The files are staged as temporaries in ``folder`` and renamed into place (inside a run's
        :func:`~mhaaudit.io.staged_outputs`, with the run's other outputs). A symbolic link at
        ``folder`` is refused rather than followed; one at a file's place is replaced by the rename.
        Returns ``folder`` as a ``Path``. Only what :meth:`load` reads back is written (:meth:`checked`).

        Raises:
            InputError: when the fields disagree (:meth:`checked`): nothing is written.
            OutputError: when ``folder`` is a symbolic link or a file, its parent folder does not exist, or the
                folder or either file cannot be made or written.
            OSError: a failure of safetensors while writing (re-raised as an OSError when it is not one), which
                :func:`~mhaaudit.staging.atomic_path` reports as an OutputError.
        """
        from safetensors.torch import save_file

        n, d, query_index = self._fields()  # as load reads them back: plain ints, the query counted from the start
        dest = Path(folder)
        if dest.is_symlink():
            raise OutputError(
                f"cannot write features to {dest}: it is a symbolic link (to {os.readlink(dest)}); "
                "features are written into a real folder only"
            )
        if dest.exists() and not dest.is_dir():
            raise OutputError(f"cannot write features to {dest}: it is a file")
        parent = dest.parent if str(dest.parent) else Path(".")
        if not parent.exists():
            raise OutputError(f"cannot write features to {dest}: folder {parent} does not exist")
        tensors = {"queries": self.queries.contiguous().cpu(), "a3": self.a3.contiguous().cpu()}
        tensors.update({k: v.contiguous().cpu() for k, v in self.context.items()})
        meta = {
            **self.meta,
            "n": n,
            "d": d,
            "T": self.T,
            "query_index": query_index,
            "dtype": str(self.dtype).replace("torch.", ""),
            "stamp": stamp(),
        }
        with staged_outputs():
            try:
                make_output_folder(dest)
            except OSError as exc:
                raise OutputError(f"cannot write features to {dest}: {exc.strerror or exc}") from exc
            with atomic_path(dest / FEATURES_FILE) as tmp:
                try:
                    save_file(tensors, str(tmp))
                except Exception as exc:  # safetensors reports a full disk as its own error type
                    if isinstance(exc, OSError):
                        raise
                    raise OSError(" ".join(str(exc).split())) from exc
            with atomic_path(dest / META_FILE) as tmp:
                tmp.write_text(json.dumps(meta, indent=2, default=str))
        return dest

    @classmethod
    def load(cls, folder: str | Path) -> FeatureSet:
        """The features a :meth:`save` wrote into ``folder``, checked against what it writes.

        Raises:
            InputError: when ``folder`` lacks ``features.safetensors`` or ``meta.json`` (naming its per-column
                subfolders when it holds some), either file is a symbolic link leading out of the folder, is not a
                regular file or cannot be read, or their
                contents disagree with what :meth:`save` writes.
        """
        from safetensors.torch import load_file

        folder = Path(folder)
        f, m = folder / FEATURES_FILE, folder / META_FILE
        if not f.exists() or not m.exists():
            columns = (
                sorted(p.name for p in folder.iterdir() if (p / FEATURES_FILE).is_file()) if folder.is_dir() else []
            )
            if columns:  # the folder given to check --save-features: one subfolder per column
                raise InputError(
                    f"{folder} holds one saved feature folder per column ({', '.join(columns)}); "
                    f"pass one of them, e.g. {folder / columns[0]}"
                )
            raise InputError(f"{folder} is not a saved feature folder (expected {FEATURES_FILE} and {META_FILE})")
        for file in (f, m):  # a named pipe would block the reader for good, a device never end
            regular_file(file, InputError, f"saved features in {folder}: {file.name}")
        # a link leading out of the folder is refused, as in model and data folders
        folder_files(folder, InputError, "saved feature folder", keep={FEATURES_FILE, META_FILE}.__contains__, depth=0)
        meta = read_json(m, InputError, f"saved features in {folder}: {META_FILE}")
        try:
            header = safetensors_header(f)  # its stated length checked against the file before anything is read
        except Exception as exc:  # unreadable, truncated or not a safetensors file
            raise InputError(f"cannot read saved features in {folder}: {' '.join(str(exc).split())[:200]}") from exc
        # every tensor is read whole: what the header declares must fit (a sparse file declares what it lacks)
        declared = sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")
        refuse_unless_fits(f, declared, "a saved feature folder's tensors are read whole", hint="")
        try:
            with native_name(f) as name:  # a name safetensors takes, whatever bytes the folder's own holds
                t = load_file(name)
        except Exception as exc:  # unreadable, truncated or not what --save-features writes
            raise InputError(f"cannot read saved features in {folder}: {' '.join(str(exc).split())[:200]}") from exc
        n, d, query_index = _check_saved(f"saved features in {folder} are", meta, t)
        ctx = {k: v for k, v in t.items() if k.startswith("context_")}
        return cls(queries=t["queries"], a3=t["a3"], context=ctx, n=n, d=d, query_index=query_index, meta=meta)


def _index(v):
    """``v`` as an int when it is an integer of any kind (a NumPy integer too), else ``v`` itself."""
    if isinstance(v, bool):
        return v
    try:
        return operator.index(v)
    except TypeError:
        return v


def _check_saved(
    where: str, meta, tensors: dict, files: tuple[str, str] = (META_FILE, FEATURES_FILE)
) -> tuple[int, int, int]:
    """(n, d, query_index) of a saved feature folder (``where``: ``"saved features in FOLDER are"``), after
    checking that meta.json and the tensors agree with what ``FeatureSet.save`` writes.

    Raises:
        InputError: naming the field, when meta.json is not an object, n, d or query_index is not an integer in
            range (at most 2^63 - 1), a tensor is missing, a tensor's shape disagrees with (T, d) or with
            meta.json's T, one example's n x d tokens in the features' dtype would take more than 2^63 - 1
            bytes (no tensor holds them), n > d beside context ranks that were decided (only n <= d has them), or a
            context rank outside 0..min(n, d) (and not -1).
    """

    def malformed(what: str) -> str:
        return f"{where} malformed: {what}"

    if not isinstance(meta, dict):
        raise InputError(malformed(f"{files[0]} holds {type(meta).__name__}, not a JSON object"))

    def count(key: str, minimum: int) -> int:
        v = meta.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise InputError(malformed(f"{files[0]} gives {key} = {v!r}, expected an integer of at least {minimum}"))
        if v > MAX_INT64:  # no tensor has a dimension this long: refused here, not by a check of sizes later
            most = f"more than {MAX_INT64} (2^63 - 1), the most a tensor's side can be"
            raise InputError(malformed(f"{files[0]} gives {key} = {v}, {most}"))
        return v

    n, d, query_index = count("n", 1), count("d", 1), count("query_index", 0)
    if query_index >= n:
        raise InputError(malformed(f"{files[0]} gives query_index = {query_index}, outside the n = {n} tokens"))
    # features reduced without contexts (StreamingReducer(contexts=False)) have none of the context arrays
    context = _CONTEXT_ARRAYS if any(k in tensors for k in _CONTEXT_ARRAYS) else ()
    missing = [k for k in ("queries", "a3", *context) if k not in tensors]
    if missing:
        raise InputError(malformed(f"{files[1]} has no tensor {missing[0]!r}"))
    odd = [k for k in ("queries", "a3", *context) if not isinstance(tensors[k], torch.Tensor)]
    if odd:
        raise InputError(malformed(f"{odd[0]} is {type(tensors[odd[0]]).__name__}, not a tensor"))
    q = tensors["queries"]
    if q.ndim != 2 or q.shape[1] != d:
        raise InputError(malformed(f"queries have shape {tuple(q.shape)}, expected (T, d) with d = {d}"))
    need = n * d * q.element_size()
    if need > MAX_INT64:  # the n x d tokens of one example, which the features were reduced from, fit no tensor
        raise InputError(
            malformed(
                f"{files[0]} gives n = {n}: the n x d tokens of one example ({n} x {d} of "
                f"{str(q.dtype).replace('torch.', '')}) would take {need} bytes, more than a tensor can hold "
                f"({MAX_INT64}, 2^63 - 1), so no features were reduced from them"
            )
        )
    T = q.shape[0]
    given_T = meta.get("T", T)
    if isinstance(given_T, bool) or not isinstance(given_T, int) or given_T != T:  # (40.0 is no count of examples)
        raise InputError(malformed(f"{files[0]} gives T = {meta['T']!r}, the tensors hold {T} examples"))
    if tuple(tensors["a3"].shape) != tuple(q.shape):
        raise InputError(malformed(f"a3 has shape {tuple(tensors['a3'].shape)}, queries {tuple(q.shape)}"))
    for k in context:
        if tuple(tensors[k].shape) != (T,):
            raise InputError(malformed(f"{k} has shape {tuple(tensors[k].shape)}, expected ({T},)"))
    if not context:
        return n, d, query_index
    decided = (tensors["context_rank"] >= 0).nonzero()  # a context's rank is decided only for n <= d, else -1
    if n > d and len(decided):
        i = int(decided[0])
        raise InputError(
            malformed(
                f"{files[0]} gives n = {n} > d = {d}, but the context ranks were decided (example {i} has rank "
                f"{int(tensors['context_rank'][i])}), as they are only for n <= d (for n > d each is -1)"
            )
        )
    ranks = tensors["context_rank"]
    above = ((ranks < -1) | (ranks > min(n, d))).nonzero()  # an n x d matrix's rank is at most min(n, d); -1: none
    if len(above):
        i = int(above[0])
        raise InputError(
            malformed(
                f"example {i} has context rank {int(ranks[i])}, where an n x d context matrix (n = {n}, d = {d}) has "
                f"a rank from 0 to {min(n, d)} (-1 where none was decided)"
            )
        )
    return n, d, query_index


def _assumption_3_rows(q: torch.Tensor, tokens: torch.Tensor, top: float) -> torch.Tensor:
    """Each example's query plus the mean of its tokens (Assumption 3's vectors), in the tokens' dtype: summed in
    float32 at least and rounded once. ``top``: the tokens' largest absolute value.

    Raises:
        ModelError: when a sum overflows the tokens' dtype (finite float16 tokens above half its largest value).
    """
    wide = torch.promote_types(tokens.dtype, torch.float32)
    a3 = (q.to(wide) + tokens.mean(dim=1, dtype=wide)).to(tokens.dtype)
    if 2 * top > torch.finfo(tokens.dtype).max and not bool(torch.isfinite(a3).all()):
        raise ModelError(
            f"the query plus the mean of its tokens (Assumption 3's vectors) overflows {str(tokens.dtype)[6:]} at "
            f"this probe point (largest activation {top:.4g}): its sums do not fit that dtype"
        )
    return a3


class StreamingReducer:
    """Feed token batches; keep O(T d) state.

    ``query_index`` picks the query token of each example; ``rule`` decides the context ranks (the first
    batch's dtype's rule when None); ``contexts=False`` keeps the query and Assumption 3 rows only (the
    feature set's ``context`` is then empty: no Assumption 2, for a caller that tests the vectors alone).
    Constructing refuses only a ``query_index`` that is not an integer and a ``rule`` that is not a RankRule.
    """

    def __init__(self, query_index: int, rule: RankRule | None = None, contexts: bool = True):
        self.query_index = validate.integer("query_index", query_index, minimum=None)
        self.rule = None if rule is None else RankRule.checked(rule)
        self.contexts = contexts
        self._q: list[torch.Tensor] = []
        self._a3: list[torch.Tensor] = []
        self._ctx: ContextRanks | None = None
        self.n: int | None = None
        self.d: int | None = None
        self.dtype: torch.dtype | None = None

    def update(self, tokens: torch.Tensor) -> None:
        """Reduce one (B, n, d) batch: keep its query rows, its Assumption 3 rows and its context-rank statistics.

        Raises:
            InputError: when ``tokens`` is not a 3-D tensor of real floating values
                (:func:`~mhaaudit.contexts.real_tensor`), or ``query_index`` is not one of its n tokens.
            ModelError: when the activations hold NaN or infinite values.
        """
        tokens = real_tensor(tokens, "token batches", 3, "(B, n, d)")
        _B, n, d = tokens.shape
        if not -n <= self.query_index < n:
            raise InputError(
                Param("query_index") + f" {self.query_index} is outside the n = {n} tokens of each example "
                f"(from {-n} to {n - 1})"
            )
        top = max_abs(tokens)  # one pass: NaN or infinite values show in it, and the rescaling reads it
        if tokens.is_floating_point() and not math.isfinite(top):
            raise ModelError(
                "the activations at this probe point hold NaN or infinite values (the model's weights or "
                "inputs overflow); no rank can be decided on them"
            )
        if self.n is None:
            self.n, self.d, self.dtype = n, d, tokens.dtype
            if self.contexts:
                self._ctx = ContextRanks(self.rule or RankRule.for_dtype(tokens.dtype))
        q = tokens[:, self.query_index, :]
        # kept where the batch lies (no copy to the host per batch); clone: a row view would keep the
        # whole (B, n, d) batch alive and memory would grow with T n d
        self._q.append(q.clone())
        self._a3.append(_assumption_3_rows(q, tokens, top))
        if self._ctx is not None:
            self._ctx.update(tokens, top=top)

    def result(self, meta: dict | None = None, fed=None) -> FeatureSet:
        """The reduced features of every example fed. ``fed``: the :class:`~mhaaudit.pipeline.DataInfo`
        of the stream, when batches may have been dealt among ranks: every rank's rows are then
        gathered back into single-process order, so every rank holds the same FeatureSet.

        Raises:
            InputError: when no examples were fed (on any rank).
        """
        rows = None
        if self._q:  # the rows to the CPU once, whatever device reduced them
            with phases.phase("reduction", device=self._q[0].device):  # the batches a device kept are decided here
                context = self._ctx.arrays() if self._ctx is not None else {}
            rows = {"queries": torch.cat(self._q).cpu(), "a3": torch.cat(self._a3).cpu(), **context}
        header = (self.n, self.d)
        if fed is not None:
            rows, header = fed.gather_rows(rows, header)
        if rows is None:
            raise InputError("no examples were reduced")
        n, d = header
        assert n is not None and d is not None, "a rank that reduced rows knows their n and d"
        queries, a3 = rows.pop("queries"), rows.pop("a3")
        return FeatureSet(
            queries=queries, a3=a3, context=rows, n=n, d=d, query_index=self.query_index % n, meta=dict(meta or {})
        )


def reduce_tokens(
    tokens: torch.Tensor,
    query_index: int,
    batch_size: int = 64,
    meta: dict | None = None,
    rule: RankRule | None = None,
) -> FeatureSet:
    """Reduce an in-memory (T, n, d) token tensor to a feature set, for tests and small inputs.

    Args:
        tokens: the (T, n, d) tensor of T examples.
        query_index: the query token's position in each example.
        batch_size: examples reduced at a time (default 64).
        meta: the feature set's provenance (None: empty).
        rule: the rule the context ranks are decided under, Assumption 2's only rule (None: the tokens' dtype's).

    Returns:
        The :class:`FeatureSet` of the T examples, with ``meta``.

    Raises:
        InputError: when ``tokens`` is not a 3-D tensor of real floating values
            (:func:`~mhaaudit.contexts.real_tensor`), ``query_index`` is not one of its n tokens, or
            ``batch_size`` is not a positive integer.
        ModelError: when ``tokens`` hold NaN or infinite values.
    """
    red = StreamingReducer(query_index, rule)
    tokens = real_tensor(tokens, "tokens", 3, "(T, n, d)")
    for part in tokens.split(validate.integer("batch_size", batch_size, maximum=MAX_INT64)):
        red.update(part)
    return red.result(meta)
