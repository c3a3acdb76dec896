"""Only the weights an audit needs: the tensors the probed blocks use, read from a safetensors checkpoint.

Auditing the blocks up to L of a trained model needs the embedding tensors and those blocks,
not the deeper blocks, the final norm or a task head. The model is built with L blocks and
no weights (nothing is drawn for what will be read); :func:`used_parameters` runs it once on a
tiny input, as far as block L, and records which parameters the computation touches; only
those are read, tensor by tensor with ``safetensors.safe_open``, in the checkpoint's stored
dtype, and copied into the float32 model.

A :class:`Checkpoint` knows where each tensor lives. A sharded checkpoint's index
(``model.safetensors.index.json``) maps tensor names to shard files; the shards that hold none
of the needed tensors are never opened, and from the hub never downloaded: the index is
fetched first, then each needed shard. A single ``model.safetensors`` is opened once and read
only in part. What was read is a :class:`WeightsRead` (bytes read of bytes stored, files opened
of files present, stored dtype), which the report and the JSON ``meta`` carry.

A checkpoint this module cannot read in part (no safetensors files, or tensor names that do not
map onto the model) raises :class:`NotPartial` and the caller loads it whole with
``from_pretrained``; a needed shard that is missing or unreadable is a one-line
:class:`~mhaaudit.errors.ModelError`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Literal, overload

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from ..errors import InputError, ModelError, OfflineError, Param, one_line
from ..facts import ReadFacts
from ..facts import weights_read_text as weights_read_text
from ..feature_files import safetensors_header
from ..files import folder_files, inside, native_name, read_json
from ..sizes import human_bytes
from .file_reads import HEADER, once
from .misfit import holds_complex, shape_misfit

__all__ = [
    "INDEX_FILE",
    "INDEX_FILES",
    "SAFETENSORS_DTYPES",
    "SINGLE_FILE",
    "Checkpoint",
    "NotPartial",
    "WeightsRead",
    "check_local_indexes",
    "empty_init",
    "hub_download",
    "human_bytes",
    "used_parameters",
]

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
# Every index of a sharded checkpoint that a loader follows (ours, or transformers' for a whole load).
INDEX_FILES = (INDEX_FILE, "pytorch_model.bin.index.json")
# Tensor functions that read no values (a model asking for its dtype or device does not use that weight).
_METADATA = frozenset(
    {
        "__get__",
        "size",
        "dim",
        "numel",
        "nelement",
        "ndimension",
        "element_size",
        "stride",
        "is_floating_point",
        "is_complex",
        "is_contiguous",
        "get_device",
        "data_ptr",
        "type",
    }
)
# Tensor properties that are views of the data, not metadata: ``weight.T`` uses the weight (Falcon's Linear).
_DATA_PROPERTIES = frozenset({"T", "mT", "H", "mH", "data", "real", "imag"})
# Names older checkpoints give LayerNorm parameters (``from_pretrained`` renames them the same way).
_LEGACY_SUFFIXES = ((".weight", ".gamma"), (".bias", ".beta"))


class NotPartial(Exception):
    """The checkpoint cannot be read tensor by tensor; load it whole."""


# fmt: off
#: safetensors' dtype codes, as torch names the dtypes safetensors reads them as (another code: in lower case)
SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "U16": "uint16", "U32": "uint32", "U64": "uint64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "C64": "complex64",
}
# fmt: on


@dataclass(frozen=True)
class WeightsRead(ReadFacts):
    """What loading read: the fields of :class:`~mhaaudit.facts.ReadFacts` (``method`` "partial":
    safe_open, needed tensors only, or "whole": from_pretrained; ``stored_dtype`` e.g. "bfloat16",
    several joined by "+", most bytes first), with the loader's dict and report line."""

    def as_dict(self) -> dict:
        """The fields as a plain dict (for the JSON ``meta``; :func:`weights_read_text` reads it back)."""
        return asdict(self)


# ------------------------------------------------------------------ where the tensors live


@dataclass
class Checkpoint:
    """The tensors of a safetensors checkpoint: name -> file name, and how to get a file's local path.

    ``fetch`` returns the local path of a file (downloading it when it comes from the hub).
    """

    where: str  # the folder or hub id, for messages
    weight_map: dict[str, str]
    total_size: int | None
    fetch: Callable[[str], str]

    @property
    def files(self) -> list[str]:
        """The file names that hold the checkpoint's tensors, sorted, each once."""
        return sorted(set(self.weight_map.values()))

    @classmethod
    def local(cls, folder: str) -> Checkpoint:
        """The checkpoint in a folder: its index, else its single ``model.safetensors``.

        Raises:
            NotPartial: when the folder has neither an index nor a ``model.safetensors``.
            ModelError: when the index is malformed or names a shard outside the folder (:func:`read_index`), or
                the single file's header cannot be read.
        """
        index = os.path.join(folder, INDEX_FILE)
        if os.path.exists(index):
            return cls._from_index(folder, index, lambda fn: _local_file(folder, fn), folder=folder)
        single = os.path.join(folder, SINGLE_FILE)
        if os.path.exists(single):
            return cls.file(single, where=folder)
        raise NotPartial(f"no {INDEX_FILE} or {SINGLE_FILE} in {folder}")

    @classmethod
    def file(cls, path: str, where: str | None = None) -> Checkpoint:
        """A single safetensors file (opened once, here, to list its tensors).

        Raises:
            ModelError: when the file cannot be opened or its header is not a valid safetensors header.
        """
        names, size = _file_header(path)
        fn = os.path.basename(path)
        return cls(where or path, {k: fn for k in names}, size, lambda _fn: path)

    @classmethod
    def hub(cls, repo: str, revision: str | None, offline: bool) -> Checkpoint:
        """A hub repository's checkpoint: its index first (each shard is fetched only when needed),
        else its single ``model.safetensors`` (fetched whole).

        Raises:
            NotPartial: when the repository has neither an index nor a ``model.safetensors``.
            InputError: when ``revision`` is no branch, tag or commit of ``repo``.
            ModelError: when the index is malformed (:func:`read_index`) or the single file's header cannot be read.
        """

        def fetch(fn: str) -> str:
            return hub_download(repo, fn, revision, offline, missing_is_error=True)

        index = hub_download(repo, INDEX_FILE, revision, offline)
        if index is not None:
            return cls._from_index(repo, index, fetch)
        single = hub_download(repo, SINGLE_FILE, revision, offline)
        if single is not None:
            return cls.file(single, where=repo)
        raise NotPartial(f"{repo} has no safetensors checkpoint")

    @classmethod
    def _from_index(cls, where: str, index: str, fetch: Callable[[str], str], folder: str | None = None) -> Checkpoint:
        """The checkpoint an index describes; ``folder``: the local folder every shard must lie in."""
        doc, weight_map = read_index(index, folder)
        meta = doc.get("metadata")
        total = meta.get("total_size") if isinstance(meta, dict) else None
        total = int(total) if isinstance(total, int) and not isinstance(total, bool) and total >= 0 else None
        if folder is not None:  # the bytes stored are counted in the folder's own files, never taken on trust
            paths = [_inside(folder, fn, index) for fn in sorted(set(weight_map.values()))]
            stored = sum(os.path.getsize(p) for p in paths) if all(os.path.isfile(p) for p in paths) else None
            total = None if stored is None else (total if total is not None and total <= stored else stored)
        return cls(where, weight_map, total, fetch)

    # -------------------------------------------------------------- reading

    def load_into(self, module: nn.Module, used: set[str], *, prefix: str, misfit: str) -> WeightsRead:
        """Copy the tensors of the ``used`` parameters / buffers of ``module`` from the checkpoint.

        Returns what was read: bytes, files and tensors, and the dtype(s) they are stored in (:meth:`read_facts`).

        Raises:
            NotPartial: when a used parameter has no tensor here under any name the loading code of
                transformers would accept (the caller then loads the checkpoint whole).
            ModelError: when the file the index names does not hold a needed tensor, or a tensor's shape differs
                from the model's, or it holds complex values where the model's are real (``misfit`` begins the
                message).
        """
        targets = dict(module.named_parameters(remove_duplicate=False))
        buffers = dict(module.named_buffers(remove_duplicate=False))
        plan: dict[str, list[tuple[str, torch.Tensor]]] = {}
        keys = self.keys_for(module, used, prefix=prefix)
        for name, key in keys.items():
            dest = targets[name] if name in targets else buffers[name]  # used: names of the module's own tensors
            plan.setdefault(self.weight_map[key], []).append((key, dest))
        for fn in sorted(plan):
            path = self.fetch(fn)
            with _opened(path, self.where) as fh:
                for key, dest in plan[fn]:
                    try:
                        t = fh.get_tensor(key)
                    except Exception as exc:  # the index names a shard that does not hold it
                        raise ModelError(
                            f"the checkpoint {self.where} is malformed: its index puts {key} in {fn}, "
                            f"which does not hold it ({one_line(exc, 80)})"
                        ) from exc
                    if tuple(t.shape) != tuple(dest.shape):
                        raise ModelError(f"{misfit}: {shape_misfit(key, t.shape, dest.shape)}")
                    if t.is_complex() and not dest.is_complex():  # copy_ would drop the imaginary part
                        raise ModelError(f"{misfit}: {holds_complex(key)}")
                    with torch.no_grad():
                        dest.copy_(t)
        return self.read_facts(keys)

    def read_facts(self, keys: Mapping[str, str]) -> WeightsRead:
        """What :meth:`load_into` reads of the tensors ``keys`` names (parameter name -> the checkpoint's tensor
        name, as :meth:`keys_for` gives them), from the files' headers alone (those read before, within
        ``file_reads.read_once``): the bytes of each parameter's tensor, the files that hold them and the dtypes
        they are stored in, of the checkpoint's bytes, files and tensors.

        Raises:
            ModelError: when a file cannot be read, its header is not a safetensors header, or it does not hold a
                tensor its index puts there.
        """
        by_file: dict[str, list[str]] = {}
        for key in keys.values():  # a tensor two parameters share counts for each, as it is read for each
            by_file.setdefault(self.weight_map[key], []).append(key)
        dtype_bytes: dict[str, int] = {}
        for fn, listed in by_file.items():
            try:
                header = _header(self.fetch(fn))
            except (OSError, ValueError) as exc:
                raise ModelError(f"cannot read {fn} of the checkpoint {self.where}: {one_line(exc, 160)}") from exc
            for key in listed:
                entry = header.get(key)
                if not isinstance(entry, dict):
                    raise ModelError(
                        f"the checkpoint {self.where} is malformed: its index puts {key} in {fn}, which does not "
                        "hold it"
                    )
                dt = SAFETENSORS_DTYPES.get(entry["dtype"], str(entry["dtype"]).lower())
                dtype_bytes[dt] = dtype_bytes.get(dt, 0) + entry["data_offsets"][1] - entry["data_offsets"][0]
        stored = "+".join(sorted(dtype_bytes, key=lambda d: -dtype_bytes[d])) or "none"
        read = sum(dtype_bytes.values())
        return WeightsRead(
            "partial", stored, read, self.total_size, len(by_file), len(self.files), len(keys), len(self.weight_map)
        )

    def keys_for(self, module: nn.Module, used: set[str], *, prefix: str) -> dict[str, str]:
        """The checkpoint's name of the tensor of each of the ``used`` parameters / buffers of
        ``module`` (sorted by parameter name), as :meth:`load_into` reads them; a buffer the model
        computes itself (position ids, rotary frequencies) and the checkpoint lacks is left out.

        Raises:
            NotPartial: when a used parameter has no tensor here under any name the loading code of
                transformers would accept.
        """
        buffers = dict(module.named_buffers(remove_duplicate=False))
        saved = saved_names(module, used)
        out: dict[str, str] = {}
        for name in sorted(used):
            key = self._key_for(saved[name], prefix) or self._key_for(name, prefix)
            if key is None:
                if name in buffers:
                    continue  # a buffer the model computes itself (position ids, rotary frequencies)
                raise NotPartial(f"no tensor for {name} in {self.where}")
            out[name] = key
        return out

    def _key_for(self, name: str, prefix: str) -> str | None:
        candidates = [name, f"{prefix}.{name}"] if prefix else [name]
        for old, new in _LEGACY_SUFFIXES:
            if name.endswith(old):
                stem = name[: -len(old)] + new
                candidates += [stem, f"{prefix}.{stem}"] if prefix else [stem]
        return next((c for c in candidates if c in self.weight_map), None)


def saved_names(module: nn.Module, names: set[str]) -> dict[str, str]:
    """The name under which the library writes each of ``names`` into a checkpoint.

    Recent transformers releases renamed some modules (ViT's ``encoder.layer.0.attention.attention.query``
    became ``layers.0.attention.q_proj``) and still read and write checkpoints under the former
    names; their own reverse mapping gives them. A parameter the mapping transforms (fuses or
    splits) keeps its name here, is not found, and the checkpoint is loaded whole.
    """
    same = {n: n for n in names}
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # releases without renamed modules
        return same
    tensors = {
        **dict(module.named_buffers(remove_duplicate=False)),
        **dict(module.named_parameters(remove_duplicate=False)),
    }
    mine = {n: tensors[n] for n in names if n in tensors}
    try:
        # any module: one transformers cannot map raises, and is caught below
        written = revert_weight_conversion(module, dict(mine))  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a mapping this code cannot use: the names as they are
        return same
    by_id = {id(t): k for k, t in written.items()}
    return {n: by_id.get(id(t), n) for n, t in mine.items()} | {n: n for n in names if n not in mine}


def read_index(index: str, folder: str | None = None) -> tuple[dict, dict[str, str]]:
    """(document, weight_map) of a sharded checkpoint's index.

    Every shard name must be a plain relative file name (no absolute path, no ``..``); with a
    local ``folder``, it must also resolve inside that folder, symlinks followed.

    Raises:
        ModelError: when the index cannot be read, is not a regular file or not JSON, has no non-empty
            ``weight_map`` of names to file names, or names a shard that is not a plain file name or (with
            ``folder``) lies outside it.
    """
    doc = read_json(index, ModelError, f"the checkpoint index {index}")  # a regular file, bounded, JSON
    wm = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wm, dict) or not wm or not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
        raise ModelError(
            f'the checkpoint index {index} is malformed: it needs a "weight_map" of tensor names to shard file names'
        )
    for fn in set(wm.values()):
        _check_shard_name(fn, index)
        if folder is not None:
            _inside(folder, fn, index)
    return doc, dict(wm)


def check_local_indexes(folder: str) -> None:
    """Refuse, before anything is read, a folder whose checkpoint index names a file outside it."""
    for name in INDEX_FILES:
        index = os.path.join(folder, name)
        if os.path.isfile(index):
            read_index(index, folder)


def _check_shard_name(fn: str, index: str) -> None:
    parts = fn.replace("\\", "/").split("/")
    if (
        not fn.strip()
        or "\0" in fn
        or os.path.isabs(fn)
        or fn.startswith(("/", "\\"))
        or ".." in parts
        or (len(fn) > 1 and fn[1] == ":")
    ):
        raise ModelError(
            f"the checkpoint index {index} is malformed: the shard name {fn[:80]!r} is not a file name "
            f"inside the model folder"
        )


def _cache_repository(snapshot: str) -> str | None:
    """The hub cache's repository folder (``models--org--name``) of ``snapshot`` when it is laid out as one of
    its snapshot folders (``models--org--name/snapshots/<revision>``), else None."""
    parent, repo = os.path.dirname(snapshot), os.path.dirname(os.path.dirname(snapshot))
    if os.path.basename(parent) == "snapshots" and os.path.basename(repo).startswith("models--"):
        return repo
    return None


def _roots(root: str) -> list[str]:
    """Where the files of the model folder ``root`` (a real path) may lie: in it, and, for a
    snapshot folder of the hub cache, whose files are links into the repository's ``blobs``, there."""
    repo = _cache_repository(root)
    return [root] if repo is None else [root, os.path.join(repo, "blobs")]


def check_links_inside(folder: str, what: str = "model folder") -> None:
    """Refuse, before anything is read, a model folder holding a symbolic link that leads outside
    it (a config, tokenizer or weights file planted as a link to another file on the machine), or
    an entry that is neither a file nor a folder (a named pipe or ``/dev/zero`` as its
    ``config.json`` would block the loader or never end): neither transformers nor the checkpoint
    readers then read outside the folder named (:func:`mhaaudit.files.folder_files`, as data folders).

    Raises:
        ModelError: when an entry of ``folder`` is a symbolic link resolving outside it (and outside the hub
            cache's ``blobs`` for a snapshot folder), or is a named pipe, a device or a socket; ``what`` names
            the folder there.
    """
    folder_files(folder, ModelError, what, roots=_roots(os.path.realpath(folder)), depth=0, hidden=True)


def _inside(folder: str, fn: str, index: str) -> str:
    """The real path of shard ``fn`` of a local checkpoint, which must lie inside ``folder`` (or, for a
    snapshot folder of the hub cache, whose files are links into the repository's ``blobs``, there).

    Raises:
        ModelError: when ``fn`` resolves to the folder itself or outside it; ``index`` is named as malformed.
    """
    root = os.path.realpath(folder)
    path = os.path.realpath(os.path.join(root, fn))
    if path == root or not inside(path, _roots(root)):
        raise ModelError(
            f"the checkpoint index {index} is malformed: the shard {fn[:80]!r} resolves to {path}, "
            f"outside the model folder {root}"
        )
    return path


def _local_file(folder: str, fn: str) -> str:
    path = _inside(folder, fn, os.path.join(folder, INDEX_FILE))
    if not os.path.isfile(path):
        raise ModelError(
            f"the checkpoint in {folder} is incomplete: its index names {fn}, which holds tensors the audit "
            f"needs, but the file is missing"
        )
    return path


def _header(path: str) -> dict:
    """The checked safetensors header of ``path``, read once within ``file_reads.read_once``.

    Raises:
        OSError, ValueError: as ``feature_files.safetensors_header``.
    """
    return once(HEADER, path, lambda: safetensors_header(path))


def _file_header(path: str) -> tuple[list[str], int]:
    """The tensor names of a safetensors file and the bytes of their data (from the header only: the one its
    shapes were checked from, within ``file_reads.read_once``).

    Raises:
        ModelError: when the file cannot be opened or its header is not a valid safetensors header.
    """
    try:
        header = _header(path)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read the checkpoint {path}: {one_line(exc, 160)}") from exc
    names = [k for k in header if k != "__metadata__"]
    size = sum(int(header[k]["data_offsets"][1]) - int(header[k]["data_offsets"][0]) for k in names)
    return names, size


@contextlib.contextmanager
def _opened(path: str, where: str) -> Iterator:
    from safetensors import safe_open

    with contextlib.ExitStack() as stack:
        try:  # by a name safe_open takes, whatever bytes the file's own name holds
            fh = safe_open(stack.enter_context(native_name(path)), framework="pt", device="cpu")
        except Exception as exc:  # unreadable, truncated or not safetensors
            raise ModelError(
                f"cannot read {os.path.basename(path)} of the checkpoint {where}, which holds tensors the "
                f"audit needs: {one_line(exc, 160)}"
            ) from exc
        with fh:
            yield fh


# ------------------------------------------------------------------ the hub


@overload
def hub_download(
    repo: str, filename: str, revision: str | None, offline: bool, *, missing_is_error: Literal[True]
) -> str: ...


@overload
def hub_download(
    repo: str, filename: str, revision: str | None, offline: bool, *, missing_is_error: bool = False
) -> str | None: ...


def hub_download(
    repo: str, filename: str, revision: str | None, offline: bool, *, missing_is_error: bool = False
) -> str | None:
    """The local path of ``filename`` of hub ``repo`` at ``revision``, downloaded when needed.

    A file the repository does not have is None, and so is a file not cached while offline,
    unless ``missing_is_error``.

    Raises:
        InputError: when ``revision`` is no branch, tag or commit of ``repo``.
        OfflineError: with ``missing_is_error``, when the file is not cached and the hub cannot be reached.
        ModelError: with ``missing_is_error``, when the repository has no such file.
    """
    import huggingface_hub
    from huggingface_hub.utils import EntryNotFoundError, LocalEntryNotFoundError, RevisionNotFoundError

    try:
        return _in_its_repository(
            huggingface_hub.hf_hub_download(repo, filename, revision=revision, local_files_only=offline), filename, repo
        )
    except RevisionNotFoundError as exc:
        raise InputError(Param("revision") + f" {revision}: no such branch, tag or commit in {repo}") from exc
    except LocalEntryNotFoundError as exc:  # (a kind of EntryNotFoundError in some releases: first)
        if missing_is_error:
            raise OfflineError(f"{filename} of {repo} is not in the local cache and the hub cannot be reached") from exc
        return None
    except EntryNotFoundError as exc:
        if missing_is_error:
            raise ModelError(
                f"the checkpoint of {repo} is incomplete: its index names {filename}, which holds tensors "
                f"the audit needs, but the hub has no such file"
            ) from exc
        return None


def _in_its_repository(path: str, filename: str, repo: str) -> str:
    """``path``, the hub cache's copy of ``filename`` of ``repo``, once it is known to resolve inside the cache's
    copy of that repository (``models--org--name``: its snapshots and ``blobs``), the snapshot folder named by
    the cache's layout, not by where a link in it leads: a link planted in the cache that leads elsewhere (a
    file, or the snapshot folder itself) is refused as it is in a model folder named by its path. A path outside
    the cache's layout (a folder the hub client was pointed at) must resolve inside its own folder.

    Raises:
        ModelError: when ``path`` resolves outside them, or is not a regular file.
    """
    snapshot = path
    for _ in filename.replace("\\", "/").split("/"):
        snapshot = os.path.dirname(snapshot)
    root = os.path.realpath(_cache_repository(snapshot) or snapshot)
    real = os.path.realpath(path)
    if not inside(real, [root]) or not os.path.isfile(real):
        raise ModelError(
            f"{filename} of {repo} in the hub cache ({path}) is a link to {real}, outside the cache's copy of the "
            "repository, or not a file: refused, as a model folder holding such a link is"
        )
    return path


# ------------------------------------------------------------------ which weights are used


@contextlib.contextmanager
def empty_init() -> Iterator[None]:
    """Build a transformers model without drawing its weights (they are read from a checkpoint)."""
    ctx = None
    for where in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            mod = __import__(where, fromlist=["no_init_weights"])
            ctx = getattr(mod, "no_init_weights", None)
        except ImportError:  # pragma: no cover - depends on the transformers release
            ctx = None
        if ctx is not None:
            break
    with ctx() if ctx is not None else contextlib.nullcontext():
        yield


def used_parameters(module: nn.Module, run: Callable[[], object]) -> set[str]:
    """The names of the parameters and buffers of ``module`` that ``run()`` passes to torch operations.

    ``run`` is one forward pass as far as the deepest probed block: whatever it does not touch
    (deeper blocks, final norms, heads) is not needed. Tied parameters count under every name.
    """
    named = list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers(remove_duplicate=False))
    ids = {id(t) for _, t in named}
    seen: set[int] = set()

    class _Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if name in _METADATA and not (
                name == "__get__" and getattr(getattr(func, "__self__", None), "__name__", "") in _DATA_PROPERTIES
            ):
                return func(*args, **kwargs)
            for a in tree_flatten((args, kwargs))[0]:
                if isinstance(a, torch.Tensor) and id(a) in ids:
                    seen.add(id(a))
            return func(*args, **kwargs)

    with torch.no_grad(), _Record():
        run()
    return {name for name, t in named if id(t) in seen}
