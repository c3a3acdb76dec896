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
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .checks import ContextRankResult, ContextRanks, assumption_2_from_arrays
from .errors import InputError, OutputError
from .io import ordinary_mode, stamp
from .numerics import RankRule

FEATURES_FILE = "features.safetensors"
META_FILE = "meta.json"


@dataclass(repr=False)
class FeatureSet:
    """Reduced features of T examples at one probe point."""

    queries: torch.Tensor  # (T, d), the activations' dtype
    a3: torch.Tensor  # (T, d): query + mean of the n context rows
    context: dict  # per-example Assumption 2 statistics (see ContextRanks.arrays)
    n: int
    d: int
    query_index: int
    meta: dict = field(default_factory=dict)

    @property
    def T(self) -> int:
        return int(self.queries.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        return self.queries.dtype

    def __repr__(self) -> str:
        m = self.meta
        where = " ".join(str(m[k]) for k in ("model", "variant") if m.get(k)) + (f" layer {m['layer']}" if "layer" in m else "")
        return (f"<FeatureSet {where + ': ' if where else ''}T = {self.T}, n = {self.n}, d = {self.d}, "
                f"{str(self.dtype).replace('torch.', '')}, query token {self.query_index}>")

    def rule(self, rtol: float | None = None, atol: float | None = None) -> RankRule:
        return RankRule.for_dtype(self.dtype, rtol=rtol, atol=atol)

    def assumption_2(self, rule: RankRule) -> ContextRankResult:
        return assumption_2_from_arrays(self.context, n=self.n, d=self.d, rule=rule)

    def save(self, folder: str | Path) -> Path:
        """Write ``features.safetensors`` and ``meta.json`` into ``folder`` (atomically)."""
        from safetensors.torch import save_file

        dest = Path(folder)
        if dest.exists() and not dest.is_dir():
            raise OutputError(f"cannot write features to {dest}: it is a file")
        parent = dest.parent if str(dest.parent) else Path(".")
        if not parent.exists():
            raise OutputError(f"cannot write features to {dest}: folder {parent} does not exist")
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=parent))
        try:
            tensors = {"queries": self.queries.contiguous().cpu(), "a3": self.a3.contiguous().cpu()}
            tensors.update({k: v.contiguous().cpu() for k, v in self.context.items()})
            save_file(tensors, str(tmp / FEATURES_FILE))
            meta = {**self.meta, "n": self.n, "d": self.d, "T": self.T, "query_index": self.query_index,
                    "dtype": str(self.dtype).replace("torch.", ""), "stamp": stamp()}
            (tmp / META_FILE).write_text(json.dumps(meta, indent=2, default=str))
            dest.mkdir(exist_ok=True)
            for name in (FEATURES_FILE, META_FILE):
                (tmp / name).chmod(ordinary_mode(dest / name))  # safetensors writes its file private (0o600)
                (tmp / name).replace(dest / name)
        except OSError as exc:
            raise OutputError(f"cannot write features to {dest}: {exc.strerror or exc}") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dest

    @classmethod
    def load(cls, folder: str | Path) -> "FeatureSet":
        from safetensors.torch import load_file

        folder = Path(folder)
        f, m = folder / FEATURES_FILE, folder / META_FILE
        if not f.exists() or not m.exists():
            columns = sorted(p.name for p in folder.iterdir() if (p / FEATURES_FILE).is_file()) if folder.is_dir() else []
            if columns:  # the folder given to check --save-features: one subfolder per column
                raise InputError(f"{folder} holds one saved feature folder per column ({', '.join(columns)}); "
                                 f"pass one of them, e.g. {folder / columns[0]}")
            raise InputError(f"{folder} is not a saved feature folder (expected {FEATURES_FILE} and {META_FILE})")
        try:
            t = load_file(str(f))
            meta = json.loads(m.read_text())
        except Exception as exc:
            raise InputError(f"cannot read saved features in {folder}: {exc}") from exc
        ctx = {k: v for k, v in t.items() if k.startswith("context_")}
        return cls(queries=t["queries"], a3=t["a3"], context=ctx, n=int(meta["n"]), d=int(meta["d"]),
                   query_index=int(meta["query_index"]), meta=meta)


class StreamingReducer:
    """Feed token batches; keep O(T d) state."""

    def __init__(self, query_index: int, rule: RankRule | None = None):
        self.query_index = query_index
        self.rule = rule
        self._q: list[torch.Tensor] = []
        self._a3: list[torch.Tensor] = []
        self._ctx: ContextRanks | None = None
        self.n: int | None = None
        self.d: int | None = None
        self.dtype: torch.dtype | None = None

    def update(self, tokens: torch.Tensor) -> None:
        if tokens.ndim != 3:
            raise InputError(f"token batches must be (B, n, d), got {tuple(tokens.shape)}")
        B, n, d = tokens.shape
        if self._ctx is None:
            self.n, self.d, self.dtype = n, d, tokens.dtype
            self._ctx = ContextRanks(self.rule or RankRule.for_dtype(tokens.dtype))
        q = tokens[:, self.query_index, :]
        # clone: a row view would keep the whole (B, n, d) batch alive and memory would grow with T n d
        self._q.append(q.detach().to("cpu", copy=True))
        self._a3.append((q + tokens.mean(dim=1)).detach().to("cpu", copy=True))
        self._ctx.update(tokens.detach())

    def result(self, meta: dict | None = None, fed=None) -> FeatureSet:
        """The reduced features of every example fed. ``fed``: the :class:`~mhaaudit.pipeline.DataInfo`
        of the stream, when batches may have been dealt among ranks: every rank's rows are then
        gathered back into single-process order, so every rank holds the same FeatureSet."""
        rows = None
        if self._ctx is not None:
            rows = {"queries": torch.cat(self._q), "a3": torch.cat(self._a3), **self._ctx.arrays()}
        header = (self.n, self.d)
        if fed is not None:
            rows, header = fed.gather_rows(rows, header)
        if rows is None:
            raise InputError("no examples were reduced")
        n, d = header
        queries, a3 = rows.pop("queries"), rows.pop("a3")
        return FeatureSet(queries=queries, a3=a3, context=rows, n=n, d=d, query_index=self.query_index % n,
                          meta=dict(meta or {}))


def reduce_tokens(tokens: torch.Tensor, query_index: int, batch_size: int = 64, meta: dict | None = None) -> FeatureSet:
    """Reduce an in-memory (T, n, d) tensor (for tests and small inputs)."""
    red = StreamingReducer(query_index)
    for part in tokens.split(batch_size):
        red.update(part)
    return red.result(meta)
