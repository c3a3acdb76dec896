"""Whether two checkpoints hold the same weights, read from their files, never assumed.

A checkpoint's :class:`Digest` covers exactly the tensors an audit of it reads (the embeddings and
the blocks up to the deepest probe point, as :meth:`~mhaaudit.models.shards.Checkpoint.keys_for`
maps them to the checkpoint's names): for each, its name, dtype and shape from the safetensors
header and the SHA-256 of its bytes as stored, combined in the order of the names, so the same
tensors give the same digest however they are split into shards. Two checkpoints with equal digests
give an audit the same numbers, byte for byte: the series reports the later one as identical and
does not audit it again.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ModelError, one_line
from ..io import safetensors_header
from ..models.shards import Checkpoint

__all__ = ["Digest", "tensor_digest"]

_CHUNK = 8 * 2**20


@dataclass(frozen=True)
class Digest:
    """The SHA-256 of the tensors an audit reads of a checkpoint (``sha256``), how many tensors and
    bytes it covers."""

    sha256: str
    tensors: int
    bytes: int


def tensor_digest(checkpoint: Checkpoint, keys: Mapping[str, str]) -> Digest:
    """The :class:`Digest` of the tensors ``keys`` names (parameter name -> the checkpoint's tensor
    name, as :meth:`~mhaaudit.models.shards.Checkpoint.keys_for` gives them) in ``checkpoint``,
    read from the files' headers and bytes.

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
            header = safetensors_header(path)
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
