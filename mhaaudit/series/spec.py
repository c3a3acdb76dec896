"""Which checkpoints a series audits: the spec read, each checkpoint named and placed by its step,
and the series checked before any work.

A series is given one of two ways:

- ``checkpoints``: a comma list of local folders (saved with ``save_pretrained``) or weights files,
  each item a path or a glob. A path keeps its place in the list; a glob's matches take the
  place of the glob, ordered by the step number in each name;
- a comma list of hub revisions (``revision="step1000,step8000"``): the model's own repository at
  each revision, in the order given.

A checkpoint's *name* is what was given (a path as typed or as the glob matched it, or the
revision); its *step* is the number its name carries (:func:`step_of`: the number after ``step``,
``checkpoint``, ``ckpt``, ``iter`` or ``global_step``, else the only number in the name), or None;
its *order* its place in the series, from 0.

Refused before any work (:func:`resolve_series`), each with one line: a glob that matches nothing,
a glob whose matches do not each carry one step number of their own (none, several, or two with
the same step), two names written as one in the results (a name that is not UTF-8 is written with its
bytes' escapes), a checkpoint that is missing or unreadable (a safetensors header that cannot describe
its tensors: :func:`.fit.header_shapes`), two checkpoints that name the same file
(compared by device and inode, so a link or another spelling of a path is found), a checkpoint of
another family, width or architecture than the first (its ``config.json``, and the names and
shapes of its tensors, read without their data), one holding a tensor of another shape than the model's
(a weights file carries no config), or one whose tokenizer or image preprocessing files differ
from the first's (the data a single run of it would read would differ); a hub revision that does
not exist (or, offline, is not in the local cache), or is named twice.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from .. import validate
from ..errors import InputError, ModelError, OfflineError, Param, one_line
from ..files import regular_file, same_place
from ..hub import is_offline
from ..models.checkpoints import CHECKPOINT_FILES
from ..models.hf_config import VOLATILE_CONFIG, WIDTH_KEYS, canonical, computes, draws_alike, short
from ..models.registry import read_json_object
from ..models.shards import INDEX_FILES, check_links_inside, check_local_indexes, hub_download, read_index
from ..request import ModelRequest
from ..runtime import MAX_INT64
from ..tables import utf8_text
from . import fit
from .fit import form_of, model_fit, refuse_checkpoint_code, refuse_unfitting, refuse_unlike_model, weights_shapes
from .hub import check_cached_weights, hub_repo

__all__ = ["MAX_CHECKPOINTS", "CheckpointRef", "Series", "resolve_series", "series_revisions", "step_of"]

#: The most checkpoints one series holds (a glob matching more is refused before any work).
MAX_CHECKPOINTS = 10_000
#: The largest step number a name can carry: the records hold the step as a 64-bit integer.
MAX_STEP = MAX_INT64
#: The files of a checkpoint that decide the data a run of it reads (its tokenizer, its image preprocessing).
DATA_FILES = tuple(
    "tokenizer.json tokenizer_config.json special_tokens_map.json vocab.txt vocab.json merges.txt spiece.model "  # noqa: SIM905
    "tokenizer.model sentencepiece.bpe.model preprocessor_config.json".split()
)
#: Config keys whose difference makes a checkpoint another family (a width key, ``WIDTH_KEYS``, another width);
#: any other is another architecture.
_FAMILY_KEYS = frozenset({"model_type"})
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
_MARKED_STEP = re.compile(r"(?:^|[^a-z])(?:global_step|step|steps|iter|iteration|checkpoint|ckpt)[-_=.]?(\d+)", re.I)


@dataclass(frozen=True)
class CheckpointRef:
    """One checkpoint of a series: its ``name`` as given, its place (``order``, from 0), the ``step``
    its name carries (None when it carries none, or several numbers and none marked as the step),
    and where it is: a local folder or file (``path``, absolute) or a hub ``revision``. ``draws_reference``: a
    revision whose config draws the random weights the reference columns were drawn from (the first revision's)."""

    name: str
    order: int
    step: int | None = None
    path: str | None = None
    revision: str | None = None
    draws_reference: bool = False

    def request(self, base: ModelRequest) -> ModelRequest:
        """The model request a single run of this checkpoint makes (``check MODEL --weights PATH``, or
        ``--revision REV``): ``base`` with its trained weights."""
        if self.revision is not None:
            return replace(base, revision=self.revision, weights_path=None)
        return replace(base, weights_path=self.path, revision=None)

    @property
    def label(self) -> str:
        """The checkpoint in words: its name, with its step when it has one."""
        return self.name if self.step is None else f"{self.name} (step {self.step})"


@dataclass(frozen=True)
class Series:
    """The checkpoints of a series, in order, where they come from (``local`` or ``hub``), and the ``model`` request
    they were checked against (:func:`resolve_series`; None: a series built by hand, which no one checked)."""

    checkpoints: tuple[CheckpointRef, ...]
    source: str  # local | hub
    model: ModelRequest | None = field(default=None, compare=False)

    @property
    def paths(self) -> list[str]:
        """The local checkpoints' paths as given (the inputs no output may overwrite, named so when one would)."""
        return [c.name for c in self.checkpoints if c.path is not None]


def step_of(name: str) -> tuple[int | None, str]:
    """The step number a checkpoint's name carries, and, when it carries none, why: the number after
    ``step``, ``checkpoint``, ``ckpt``, ``iter`` or ``global_step`` (``checkpoint-1000``,
    ``epoch2-step500``), else the only number in the name (``run-0300``); the folders above it and a
    weights file's suffix do not count. A number above 2^63 - 1 is no step number (the records hold
    the step as a 64-bit integer): the name carries none."""
    stem = os.path.basename(name.rstrip("/\\")) or name
    for suffix in _WEIGHT_SUFFIXES:
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    marked = {int(m) for m in _MARKED_STEP.findall(stem)}
    if len(marked) == 1:
        return _in_range(marked.pop())
    if len(marked) > 1:
        return None, f"it names several steps ({', '.join(map(str, sorted(marked)))})"
    numbers = re.findall(r"\d+", stem)
    if len(numbers) == 1:
        return _in_range(int(numbers[0]))
    if not numbers:
        return None, "it carries no number"
    return None, f"it carries several numbers ({', '.join(numbers)}) and none follows step, checkpoint, ckpt or iter"


def _in_range(step: int) -> tuple[int | None, str]:
    """``(step, "")``, or ``(None, why)`` for a number above :data:`MAX_STEP` (no record can hold it)."""
    if step > MAX_STEP:
        return None, f"its number {step} is larger than a step number can be (2^63 - 1)"
    return step, ""


def series_revisions(revision: str | None) -> list[str] | None:
    """The hub revisions of a series given as ``revision`` (a comma list), or None for a single revision.

    Raises:
        InputError: when an item of the list is empty.
    """
    if revision is None or "," not in revision:
        return None
    items = [r.strip() for r in revision.split(",")]
    if not all(items):
        raise InputError(Param("revision") + f" {revision!r}: an empty item; give revisions separated by commas")
    return items


def resolve_series(checkpoints, revisions: Sequence[str] | None, base: ModelRequest, outputs=()) -> Series:
    """The series ``checkpoints`` (a comma list of paths and globs, or a sequence of paths) or
    ``revisions`` (of ``base``'s hub model) names, checked before any work (see the module docstring).
    A glob's matches leave out the run's own ``outputs`` (its results file, its plot), so that the
    rerun that resumes a series whose results file lies in the glob's folder names the same checkpoints.

    Returns:
        The :class:`Series`: its checkpoints in order, each named and placed by its step.

    Raises:
        InputError: when neither or both are given, a glob matches nothing or its step numbers are ambiguous,
            a checkpoint is missing, unreadable or named twice, differs from the first in family, width,
            architecture or data files, or a revision does not exist.
        ModelError: when a checkpoint folder's index names a file outside it, or holds a link leading out.
        OfflineError: when a revision, or its weights, are not in the local cache and the hub cannot be reached.
    """
    if checkpoints is not None and revisions:
        raise InputError(
            Param("checkpoints")
            + " names local checkpoints and "
            + Param("revision")
            + " a list of hub revisions: give one of them"
        )
    if revisions:
        return Series(tuple(_hub_refs(revisions, base)), "hub", base)
    if checkpoints is None:
        raise InputError(
            "a series needs " + Param("checkpoints") + " (folders, files or a glob) or a comma list of revisions"
        )
    refs = _local_refs(checkpoints, [o for o in outputs if o is not None])
    _check_local(refs, base)
    return Series(tuple(refs), "local", base)


# --------------------------------------------------------------------------- local checkpoints


def _items(checkpoints) -> list[str]:
    """The items of ``checkpoints``: a comma list (a string) or a sequence of paths.

    Raises:
        InputError: when the list is empty or an item is empty.
    """
    if isinstance(checkpoints, (str, os.PathLike)):
        text = os.fspath(checkpoints)
        items = [t.strip() for t in text.split(",")] if isinstance(text, str) else [""]
    elif not isinstance(checkpoints, Iterable) or isinstance(checkpoints, (bytes, Mapping)):
        items = [""]  # neither a comma list nor paths: refused below
    else:  # a sequence of paths, or an iterator of them (``Path.glob``)
        items = [os.fspath(c).strip() if isinstance(c, (str, os.PathLike)) else "" for c in checkpoints]
    if not items or not all(items):
        raise InputError(
            Param("checkpoints") + f" {checkpoints!r}: give folders, files or a glob, separated by commas (none empty)"
        )
    return items


def _local_refs(checkpoints, outputs: Sequence) -> list[CheckpointRef]:
    """The checkpoints of a local spec, in order: each path in its place, each glob's matches by step
    (less the ``outputs`` of the run).

    Raises:
        InputError: when a glob matches nothing or its step numbers are ambiguous, the series is longer
            than :data:`MAX_CHECKPOINTS`, or two names would be written as one in the results.
    """
    named: list[tuple[str, int | None]] = []
    for item in _items(checkpoints):
        literal = os.path.expanduser(item)
        if glob.has_magic(item) and not os.path.lexists(literal):
            named += _glob_matches(item, outputs)
        else:
            named.append((item, step_of(item)[0]))
        if len(named) > MAX_CHECKPOINTS:
            raise InputError(Param("checkpoints") + f": more than {MAX_CHECKPOINTS} checkpoints; audit fewer at a time")
    written: dict[str, str] = {}  # the name a checkpoint's rows carry in the results: utf8_text's
    for name, _ in named:
        first = written.setdefault(text := utf8_text(name), name)
        if first != name:
            raise InputError(
                Param("checkpoints") + f": {first} and {name} would be written as one name, {text}, in the results "
                "(a name that is not UTF-8 is written with its bytes' escapes); rename one"
            )
    return [
        CheckpointRef(name, i, step, path=os.path.abspath(os.path.expanduser(name)))
        for i, (name, step) in enumerate(named)
    ]


def _glob_matches(pattern: str, outputs: Sequence = ()) -> list[tuple[str, int | None]]:
    """The matches of a glob, ordered by the step number in each name; a match that is one of the run's
    ``outputs`` is none (its results file, written by an earlier run of it).

    Raises:
        InputError: when the glob matches nothing, a match carries no step number of its own, or two
            matches carry the same step.
    """
    matches = sorted(m for m in glob.glob(os.path.expanduser(pattern)) if not any(same_place(m, o) for o in outputs))
    if not matches:
        raise InputError(Param("checkpoints") + f" {pattern}: the glob matches no file or folder")
    if len(matches) > MAX_CHECKPOINTS:
        raise InputError(
            Param("checkpoints") + f" {pattern}: the glob matches {len(matches)} paths, more than {MAX_CHECKPOINTS}"
        )
    steps: dict[int, str] = {}
    out: list[tuple[str, int]] = []
    for m in matches:
        step, why = step_of(m)
        if step is None:
            raise InputError(
                Param("checkpoints") + f" {pattern}: the step numbers are ambiguous: {m} has no step number of its "
                f"own ({why}), so the glob's matches cannot be ordered by step; list the checkpoints in order, "
                "separated by commas"
            )
        if step in steps:
            raise InputError(
                Param("checkpoints") + f" {pattern}: the step numbers are ambiguous: {steps[step]} and {m} both "
                f"carry step {step}; list the checkpoints in order, separated by commas"
            )
        steps[step] = m
        out.append((m, step))
    return [(m, step) for m, step in sorted(out, key=lambda x: x[1])]


@dataclass(frozen=True)
class _Contents:
    """What a local checkpoint holds, read cheaply before any work: its weight files (path and
    ``(device, inode)``), its config (less the keys every save rewrites), the names and shapes of its
    tensors (None when they cannot be had without reading their data: :func:`.fit.weights_shapes`), the
    digests of its data files, and the form its tensors are stored in (``safetensors`` or ``torch``)."""

    files: tuple[tuple[str, tuple[int, int]], ...]
    config: dict | None
    shapes: dict[str, tuple[int, ...]] | None
    data_files: dict[str, str]
    form: str | None = None


def _check_local(refs: list[CheckpointRef], base: ModelRequest) -> None:
    """Every checkpoint exists, is readable, names files of its own, is the first's kind, and computes as
    the model ``base`` names (:func:`.fit.refuse_unlike_model`).

    Raises:
        InputError: as :func:`resolve_series` says of local checkpoints.
        ModelError: when a folder's index names a file outside it, the folder holds a link leading out, or its
            config asks for code of its own that is not trusted.
    """
    seen: dict[tuple[int, int], tuple[str, str]] = {}
    first: tuple[CheckpointRef, _Contents] | None = None
    model: list = []  # fit.model_fit of the model, had once (when a checkpoint has a config or shapes to compare)
    for ref in refs:
        contents = _contents(ref, base)  # first: its config is read as a JSON object (or refused) before auto_map is
        if ref.path is not None and os.path.isdir(ref.path):
            refuse_checkpoint_code(ref.name, ref.path, bool(base.trust_remote_code))
        if (contents.config is not None or contents.shapes is not None) and not model:
            model += model_fit(base, VOLATILE_CONFIG)
        if contents.config is not None and model[0] is not None:
            refuse_unlike_model(ref.name, contents.config, base.model, model[0], own=model[2])
        # a weights file has no config: its shapes say its width (an alias's checkpoint with one is built from it)
        if contents.shapes is not None and not (model[2] and contents.config is not None):
            refuse_unfitting(ref.name, contents.shapes, base.model, model[1])
        for path, inode in contents.files:
            if inode in seen:
                other, other_path = seen[inode]
                same = path if path == other_path else f"{other_path} and {path} are one file"
                raise InputError(
                    Param("checkpoints") + f": {other} and {ref.name} name the same file ({same}); "
                    "name each checkpoint once"
                )
            seen[inode] = (ref.name, path)
        if first is None:
            first = (ref, contents)
        else:
            _same_kind(ref, contents, *first, loads=model[1] if model else None)


def _contents(ref: CheckpointRef, base: ModelRequest) -> _Contents:
    """What the checkpoint ``ref`` of the model ``base`` holds (:class:`_Contents`).

    Raises:
        InputError: when it is missing, unreadable, or holds no weights.
        ModelError: when a folder's index names a file outside it, or the folder holds a link leading out.
    """
    path = ref.path
    assert path is not None, "a local checkpoint has a path"
    if not os.path.exists(path):
        raise InputError(Param("checkpoints") + f" {ref.name}: no such file or folder")
    if not os.access(path, os.R_OK | (os.X_OK if os.path.isdir(path) else 0)):
        raise InputError(Param("checkpoints") + f" {ref.name}: cannot be read (permission denied)")
    try:
        if os.path.isdir(path):
            return _folder_contents(ref, path, base)
        return _file_contents(ref, path, base)
    except OSError as exc:
        raise InputError(
            Param("checkpoints") + f" {ref.name}: cannot be read ({exc.strerror or one_line(exc)})"
        ) from exc
    except ModelError as exc:  # a link leading out, a pipe, an index naming a file outside: say which checkpoint
        raise ModelError(Param("checkpoints") + f" {ref.name}: {exc}") from None


def _folder_contents(ref: CheckpointRef, folder: str, base: ModelRequest) -> _Contents:
    """A checkpoint folder's weight files, config, tensor shapes and data files.

    Raises:
        InputError: when it holds no weights file, or a weights file or its config cannot be read.
        ModelError: when its index names a file outside it, or it holds a link leading out.
    """
    check_links_inside(folder, "checkpoint folder")
    check_local_indexes(folder)
    files: list[str] = []
    shapes: dict[str, tuple[int, ...]] | None = None
    index = next((os.path.join(folder, i) for i in INDEX_FILES if os.path.isfile(os.path.join(folder, i))), None)
    if index is not None:
        _, weight_map = read_index(index, folder)
        files = [os.path.realpath(os.path.join(folder, fn)) for fn in sorted(set(weight_map.values()))]
        missing = [f for f in files if not os.path.isfile(f)]
        if missing:
            what = "is not a regular file" if os.path.exists(missing[0]) else "is missing"
            raise InputError(
                Param("checkpoints") + f" {ref.name}: its index names {os.path.basename(missing[0])}, which {what}"
            )
        for f in files:
            _readable(ref, f)
        shapes = {}
        for f in files:
            more = weights_shapes(ref.name, f, base)
            shapes = None if more is None or shapes is None else shapes | more
    else:
        found = next(
            (os.path.join(folder, fn) for fn in CHECKPOINT_FILES if os.path.isfile(os.path.join(folder, fn))), None
        )
        if found is None:
            raise InputError(
                Param("checkpoints") + f" {ref.name}: holds no weights ({', '.join(CHECKPOINT_FILES)} or an index of "
                "shards); give folders saved with save_pretrained, or weights files"
            )
        files = [found]
        _readable(ref, found)
        shapes = weights_shapes(ref.name, found, base)
    return _Contents(
        tuple((f, _inode(f)) for f in files),
        _config(ref, os.path.join(folder, "config.json")),
        shapes,
        data_files(folder),
        form_of(files[0]),
    )


def _file_contents(ref: CheckpointRef, path: str, base: ModelRequest) -> _Contents:
    """A weights file's own inode and its tensors' names and shapes (:func:`.fit.weights_shapes`).

    Raises:
        InputError: when the file cannot be read, or is not a weights file.
    """
    if not path.lower().endswith(_WEIGHT_SUFFIXES):
        raise InputError(
            Param("checkpoints") + f" {ref.name}: neither a checkpoint folder nor a weights file "
            f"({', '.join(_WEIGHT_SUFFIXES)})"
        )
    _readable(ref, path)
    shapes = weights_shapes(ref.name, path, base)
    return _Contents(((os.path.realpath(path), _inode(path)),), None, shapes, {}, form_of(path))


def _readable(ref: CheckpointRef, path: str) -> None:
    """Refuse a weights file that is not a regular file or cannot be opened and read.

    Raises:
        InputError: when it is a named pipe, a device, a socket or a folder (a pipe would block the read for
            good, a device never end), or cannot be opened or read.
    """
    try:
        regular_file(path, InputError, os.path.basename(path))
    except InputError as exc:
        raise InputError(Param("checkpoints") + f" {ref.name}: {exc}") from None
    try:
        with open(path, "rb") as fh:
            fh.read(8)
    except OSError as exc:
        raise InputError(
            Param("checkpoints")
            + f" {ref.name}: cannot read {os.path.basename(path)} ({exc.strerror or one_line(exc)})"
        ) from exc


def _inode(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _config(ref: CheckpointRef, path: str) -> dict | None:
    """A checkpoint's ``config.json`` less the keys every save rewrites; None without one.

    Raises:
        InputError: when it exists but cannot be read as a JSON object.
    """
    try:  # a regular file of bounded size and nesting: a pipe is refused, a deep nest is an input error
        data = read_json_object(path, InputError, "its config.json")
    except InputError as exc:
        raise InputError(Param("checkpoints") + f" {ref.name}: {exc}") from None
    return None if data is None else {k: v for k, v in data.items() if k not in VOLATILE_CONFIG}


def data_files(folder: str) -> dict[str, str]:
    """The sha256 of each of :data:`DATA_FILES` a folder holds (at most 64 MiB each is read)."""
    paths = {fn: os.path.join(folder, fn) for fn in DATA_FILES}
    return {fn: file_sha256(path) for fn, path in paths.items() if os.path.isfile(path)}


def file_sha256(path: str, limit: int = 64 * 2**20) -> str:
    """The sha256, in hex, of a file's first ``limit`` + 1 bytes (the whole file, up to 64 MiB)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(fh.read(limit + 1))
    return h.hexdigest()


def _same_kind(
    ref: CheckpointRef, got: _Contents, first: CheckpointRef, want: _Contents, loads: tuple | None = None
) -> None:
    """``ref`` is of the first checkpoint's family, width and architecture, and reads the same data. ``loads``:
    the model's tensors' shapes and its checkpoints' name prefix (``models.hf_weights.config_shapes``), where
    had: then only a tensor the model loads, held by one checkpoint and not the other, says they are of two
    architectures, whatever form each is saved in (one model's checkpoints saved by two tools or library versions
    differ in the others: a buffer such as ``position_ids`` saved by one, a tied tensor dropped by another).
    Without them, checkpoints of two forms are not held to the tensors they hold (a save in safetensors drops tied
    ones): a tensor the model needs that one lacks is found when it is loaded.

    Raises:
        InputError: naming the first difference found.
    """
    if got.config is not None and want.config is not None:
        diff = _first_difference(got.config, want.config)
        if diff is not None:
            key, a, b = diff
            what = "family" if key in _FAMILY_KEYS else "width" if key in WIDTH_KEYS else "architecture"
            raise InputError(
                Param(_param(ref)) + f" {ref.name} is of another {what} than the first checkpoint {first.name}: its "
                f"config has {key} = {short(a, 60)}, the first's {short(b, 60)}; a series audits the checkpoints of "
                "one model"
            )
    mine, theirs = (None if s is None else fit.as_loaded(s, loads) for s in (got.shapes, want.shapes))
    if mine is not None and theirs is not None and mine != theirs:
        # across forms (a save in safetensors drops tied tensors), only those the model loads, where known
        odd = sorted(set(mine) ^ set(theirs)) if got.form == want.form or loads is not None else []
        if loads is not None:
            expected, prefix = loads
            odd = [k for k in odd if k in expected or (prefix and k.removeprefix(prefix + ".") in expected)]
        if odd:
            where = "holds" if odd[0] in mine else "lacks"
            raise InputError(
                Param("checkpoints")
                + f" {ref.name} is of another architecture than the first checkpoint {first.name}: "
                f"it {where} the tensor {odd[0]}; a series audits the checkpoints of one model"
            )
        name = next((k for k in sorted(mine) if theirs.get(k, mine[k]) != mine[k]), None)
        if name is not None:
            raise InputError(
                Param("checkpoints") + f" {ref.name} is of another width or architecture than the first checkpoint "
                f"{first.name}: its tensor {name} has shape {mine[name]}, the first's {theirs[name]}"
            )
    if got.data_files != want.data_files:
        fn = sorted(
            k for k in set(got.data_files) | set(want.data_files) if got.data_files.get(k) != want.data_files.get(k)
        )[0]
        if fn not in got.data_files:
            said = f"it has no {fn}, the first checkpoint {first.name} has one"
        elif fn not in want.data_files:
            said = f"it has a {fn}, the first checkpoint {first.name} has none"
        else:
            said = f"its {fn} differs from the first checkpoint {first.name}'s"
        raise InputError(
            Param(_param(ref)) + f" {ref.name}: {said}; the "
            "checkpoints of a series read the same data, so they carry the same tokenizer and image preprocessing"
        )


def _param(ref: CheckpointRef) -> str:
    """The parameter that named ``ref``: a revision, or a local checkpoint."""
    return "revision" if ref.revision is not None else "checkpoints"


def _first_difference(a: dict, b: dict) -> tuple[str, object, object] | None:
    """The first key (sorted) whose value differs between two checkpoints' configs, among those that can change
    what the audit computes (``models.hf_config.computes``): a dropout rate or the random initialisation's scale
    changed between two saves of one training run makes them no two models, as it does not set one apart from
    the model."""
    for key in sorted(k for k in set(a) | set(b) if computes(k)):
        x, y = a.get(key), b.get(key)
        if x != y and canonical(x) != canonical(y):  # equal values (10000 and 10000.0), or the same JSON (NaN)
            return key, x, y
    return None


# --------------------------------------------------------------------------- hub revisions


def _hub_refs(revisions: Sequence[str], base: ModelRequest) -> list[CheckpointRef]:
    """The revisions of ``base``'s hub model, checked: each exists (in the local cache, offline), is
    named once, and has the first one's config and data files (``draws_reference``: the first's random weights too).

    Raises:
        InputError: when a revision is named twice or does not exist, the model is a local folder, or a
            revision's config or data files differ from the first's.
        OfflineError: when a revision, or its weights, are not in the local cache and the hub cannot be reached.
    """
    validate.integer("revisions", len(revisions), maximum=MAX_CHECKPOINTS)
    twice = sorted({r for r in revisions if list(revisions).count(r) > 1})
    if twice:
        raise InputError(Param("revision") + f": {twice[0]} is named twice; name each revision once")
    repo = hub_repo(base)
    offline = is_offline()
    refs = [CheckpointRef(r, i, step_of(r)[0], revision=r) for i, r in enumerate(revisions)]
    first: tuple[CheckpointRef, _Contents] | None = None
    out: list[CheckpointRef] = []
    for ref in refs:
        config = hub_download(repo, "config.json", ref.revision, offline)
        if config is None:
            if offline:
                raise OfflineError(
                    Param("revision") + f" {ref.revision}: {repo} at this revision is not in the local cache and the "
                    "hub cannot be reached"
                )
            raise InputError(Param("revision") + f" {ref.revision}: {repo} has no config.json at this revision")
        if offline:
            check_cached_weights(repo, ref.revision)
        data = {}
        for fn in DATA_FILES:
            path = hub_download(repo, fn, ref.revision, offline)
            if path is not None:
                data[fn] = file_sha256(path)
        contents = _Contents((), _config(ref, config), None, data)
        if first is None:
            first = (ref, contents)
        else:
            _same_kind(ref, contents, *first)
        alike = contents.config is not None and draws_alike(contents.config, first[1].config or {})
        out.append(replace(ref, draws_reference=alike))
    return out
