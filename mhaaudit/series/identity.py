"""Whether two checkpoints hold the same weights, read from their files, never assumed.

A checkpoint's :class:`Digest` covers exactly the tensors an audit of it reads (the embeddings and
the blocks up to the deepest probe point, as :meth:`~mhaaudit.models.shards.Checkpoint.keys_for`
maps them to the checkpoint's names): for each, its name, dtype and shape from the safetensors
header and the SHA-256 of its bytes as stored, combined in the order of the names, so the same
tensors give the same digest however they are split into shards. Two checkpoints with equal digests
give an audit the same numbers, byte for byte: the series reports the later one as identical and
does not audit it again.

A checkpoint that is not read tensor by tensor (a ``pytorch_model.bin``, a timm checkpoint: loaded
whole) gets a :func:`file_digest` instead, where its files are on this machine: the SHA-256 of each
weights file (and config) as stored, by name (a weights file named by itself under one name for all,
so that its bytes alone count). Equal files give the same model, so equal digests
again mean the same numbers; a digest of files never equals one of tensors.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ModelError, one_line
from ..models.checkpoints import checkpoint_header
from ..models.shards import Checkpoint

__all__ = ["Digest", "file_digest", "tensor_digest"]

_CHUNK = 8 * 2**20


@dataclass(frozen=True)
class Digest:
    """The SHA-256 of the tensors an audit reads of a checkpoint (``sha256``), how many tensors and
    bytes it covers; ``files`` > 0 for a :func:`file_digest` (whole files, ``tensors`` 0)."""

    sha256: str
    tensors: int
    bytes: int
    files: int = 0


def tensor_digest(checkpoint: Checkpoint, keys: Mapping[str, str]) -> Digest:
    """The :class:`Digest` of the tensors ``keys`` names (parameter name -> the checkpoint's tensor
    name, as :meth:`~mhaaudit.models.shards.Checkpoint.keys_for` gives them) in ``checkpoint``,
    read from the files' headers (those read before, within ``models.file_reads.read_once``) and bytes.

    Raises:
        ModelError: when a file cannot be read, its header is not a safetensors header, or it does not hold a
            tensor its index puts there.
    """
    by_file: dict[str, list[str]] = {}
    for key in sorted(set(keys.values())):
        by_file.setdefault(checkpoint.weight_map[key], []).append(key)
    each: dict[str, bytes] = {}
    total = 0
    for fn in sorted(by_file):
        path = checkpoint.fetch(fn)
        try:
            header = checkpoint_header(path)
            with open(path, "rb") as fh:
                start = 8 + int.from_bytes(fh.read(8), "little")
                for key in by_file[fn]:
                    entry = header.get(key)
                    if not isinstance(entry, dict):
                        raise ModelError(
                            f"the checkpoint {checkpoint.where} is malformed: its index puts {key} in {fn}, "
                            "which does not hold it"
                        )
                    begin, end = entry["data_offsets"]
                    h = hashlib.sha256(f"{key}\0{entry.get('dtype')}\0{entry.get('shape')}\0".encode())
                    fh.seek(start + begin)
                    left = end - begin
                    while left > 0:
                        chunk = fh.read(min(_CHUNK, left))
                        if not chunk:
                            raise ModelError(
                                f"{os.path.basename(path)} of the checkpoint {checkpoint.where} ends early"
                            )
                        h.update(chunk)
                        left -= len(chunk)
                    each[key] = h.digest()
                    total += end - begin
        except (OSError, ValueError) as exc:
            raise ModelError(
                f"cannot read {os.path.basename(path)} of the checkpoint {checkpoint.where}: {one_line(exc, 160)}"
            ) from exc
    combined = hashlib.sha256()
    for key in sorted(each):
        combined.update(each[key])
    return Digest(combined.hexdigest(), len(each), total)


def file_digest(paths: Mapping[str, str], where: str) -> Digest:
    """The :class:`Digest` of whole files: ``paths`` maps each file's name in the checkpoint to its local path
    (``where`` names the checkpoint in an error).

    Raises:
        ModelError: when a file cannot be read.
    """
    combined = hashlib.sha256(b"files\0")  # never the digest of tensors
    total = 0
    for name in sorted(paths):
        h = hashlib.sha256()
        try:
            with open(paths[name], "rb") as fh:
                while chunk := fh.read(_CHUNK):
                    h.update(chunk)
                    total += len(chunk)
        except OSError as exc:
            raise ModelError(f"cannot read {name} of the checkpoint {where}: {one_line(exc, 160)}") from exc
        combined.update(f"{name}\0".encode() + h.digest())
    return Digest(combined.hexdigest(), 0, total, len(paths))
