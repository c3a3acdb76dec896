"""Helpers shared by the sources: deciding what a ``data`` argument names, opening Hugging Face
datasets (hub ids or local dataset folders) with user-facing errors, the generator of the
sources' sampling (the seed rule's ``"data"`` purpose), and the cache folder.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import deque
from collections.abc import Callable, Generator, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError, InputError, MhaauditError, OfflineError, Param, one_line
from ..facts import SkipCounts
from ..files import folder_files, regular_file
from ..hub import is_offline
from ..runtime import decode_workers_env, derive_seed
from ..staging import process_scratch_folder
from ..workers import worker_pool
from .folder_checks import check_dataset_folder
from .shard_checks import size_shards

BUILTIN_NAMES = {"builtin", "built-in", "default"}
HUB_PREFIXES = ("hf:", "hub:")

# Suffixes that mark a string as a file name rather than a hub dataset id.
_FILE_SUFFIXES = {
    ".parquet",
    ".arrow",
    ".jsonl",
    ".json",
    ".txt",
    ".csv",
    ".tsv",
    ".npy",
    ".npz",
    ".safetensors",
    ".jpg",
    ".jpeg",
    ".png",
    ".bmp",
    ".gif",
    ".tif",
    ".tiff",
    ".webp",
    ".zip",
    ".tar",
    ".gz",
    ".md",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


def data_rng(seed: int, *index: int) -> np.random.Generator:
    """The generator of the sources' sampling under the user's ``seed``:
    ``numpy.random.default_rng(derive_seed(seed, "data", *index))``."""
    return np.random.default_rng(derive_seed(seed, "data", *index))


def decode_workers() -> int:
    """Threads that decode images: ``$MHAAUDIT_DECODE_WORKERS``, else the usable cores, at most 8."""
    value = decode_workers_env()
    if value is not None:
        return value
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def ordered_map(fn: Callable[[Any], Any], items: Iterable[Any], workers: int | None = None) -> Generator[Any]:
    """``fn(item)`` for every item, in the items' order, computed on a pool of ``workers`` threads
    (:func:`decode_workers` by default) that runs at most ``4 * workers`` items ahead. Image
    decoding (PIL) runs outside the interpreter lock, so the threads decode in parallel. The items
    are read on the calling thread; an error of ``fn`` is raised here, in order; leaving early
    cancels what was not started."""
    workers = decode_workers() if workers is None else max(1, int(workers))
    if workers == 1:
        yield from map(fn, items)
        return

    pending: deque = deque()
    with worker_pool(workers, "mhaaudit-decode") as pool:  # left early, it cancels what was not started
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= 4 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def cache_dir(sub: str) -> Path:
    """The folder ``sub`` of mhaaudit's cache, created when missing: ``$MHAAUDIT_CACHE``, else
    ``$XDG_CACHE_HOME/mhaaudit``, else ``~/.cache/mhaaudit``. When that cannot be written, the process's
    scratch folder for ``sub`` in the system's temporary folder, removed when the process ends (nothing is
    cached across runs then: ``staging.process_scratch_folder``)."""
    base = os.environ.get("MHAAUDIT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "mhaaudit"
    )
    path = Path(base) / sub
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=path)  # a new file: a planted link is not followed
        os.close(fd)
        os.unlink(probe)
        return path
    except OSError:
        return process_scratch_folder(f"mhaaudit-{sub.replace('/', '-')}-")


def is_builtin(data: str | None) -> bool:
    return data is None or data.strip().lower() in BUILTIN_NAMES


def looks_like_path(data: str) -> bool:
    """True when ``data`` is clearly meant as a local path (so a missing one is an error, not a hub id)."""
    if data.startswith(("/", "./", "../", "~", ".\\", "..\\")) or "\\" in data:
        return True
    if re.match(r"^[A-Za-z]:[\\/]", data):  # a Windows drive
        return True
    if Path(data).suffix.lower() in _FILE_SUFFIXES:
        return True
    return not _HUB_ID.match(data)


def classify(data: str) -> tuple[str, Any]:
    """Say what a non-built-in ``data`` argument names.

    Returns ``("hub", id_or_path)`` for a Hugging Face dataset (a hub id, or any string prefixed
    with ``hf:``/``hub:``, which may also be a local dataset folder), ``("file", Path)``,
    ``("dir", Path)``.

    Raises:
        InputError: when ``data`` is empty, or a hub prefix is followed by nothing.
        DataError: when ``data`` looks like a local path but does not exist, or names a file that is not a regular
            file (a named pipe, a device: refused before it is opened).
    """
    text = data.strip()
    if not text:
        raise InputError("empty data argument: give a path, a Hugging Face dataset id, or 'builtin'")
    for prefix in HUB_PREFIXES:
        if text.lower().startswith(prefix):
            rest = text[len(prefix) :].strip()
            if not rest:
                raise InputError(f"'{text}': nothing after '{prefix}'; give a Hugging Face dataset id")
            return "hub", rest
    path = Path(os.path.expanduser(text))
    if path.is_dir():
        return "dir", path
    if path.exists():
        return "file", regular_file(path, DataError)  # a named pipe would block the reader, a device never end
    if looks_like_path(text):
        raise DataError(f"{text}: no such file or folder")
    return "hub", text


def no_split(split: str, what: str) -> None:
    """Refuse a ``split`` other than the default, ``"train"``, for data without splits (``what`` names it).

    Raises:
        InputError: when ``split`` is not ``"train"``.
    """
    if split != "train":
        raise InputError(
            Param("split") + f" '{split}' has no effect on {what}: it has no splits (a split is chosen "
            "in a Hugging Face dataset or a DatasetDict saved with save_to_disk)"
        )


def is_local(data: str) -> bool:
    """True when ``data`` (``~`` expanded) is an existing local file or folder."""
    return Path(os.path.expanduser(data)).exists()


def open_hf_dataset(
    data: str, *, split: str, config: str | None = None, what: str, instead: str, examples: int | None = None
):
    """``datasets.load_dataset(data, config, split=split, streaming=True)`` with user-facing errors.

    ``data`` is a hub id or a local dataset folder. For a hub id while offline this raises
    OfflineError at once, without touching the ``datasets`` library. ``what`` names the kind of
    data ("image", "text") and ``instead`` says what to use offline; ``examples``, the most examples read (None:
    unknown): a local webdataset folder's shards that hold the first of them are sized before it is read, the
    others each as the reader opens it (``shard_checks.size_shards``). Returns the streaming dataset.

    Raises:
        OfflineError: when ``data`` is not local and the hub is offline or cannot be reached.
        DataError: when the dataset has no such split, is not found, is gated or private, or cannot be opened
            for any other reason (the ``datasets`` package missing included); for a local folder, when it holds a
            link leading out of it or a named pipe or device, or its metadata names data files outside it, or a row
            group of a parquet data file would not fit the memory available, or a line (a whole file, where the
            library reads it whole) of a JSON, text, CSV or XML data file, or of an image folder's metadata file,
            once decompressed, would not fit a quarter of it, nor an example of a webdataset shard, as its tar or zip
            headers declare it, or its shard cannot be read as a tar or zip archive.
        MhaauditError: an mhaaudit error of the checks of a local folder, re-raised as it is.
    """
    local = is_local(data)
    if local:
        data = os.path.expanduser(data)
    elif is_offline():
        raise OfflineError(
            f"'{data}' is not a local file or folder, so it names a Hugging Face hub dataset, but the "
            "hub cannot be reached (offline); use " + instead
        )
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise DataError(
            f"reading '{data}' needs the 'datasets' package: {one_line(exc, 300, first_line=True)}"
        ) from None

    label = f"'{data}'" + (f" (config {config})" if config else "")
    try:
        if not local or not os.path.isdir(data):
            if local:
                regular_file(data, DataError)
            return datasets.load_dataset(data, config, split=split, streaming=True)
        # What load_dataset does, with the data files the folder's metadata names checked in between.
        folder_files(data, DataError, "dataset folder")  # no link leading out of it, no pipe or device in it
        builder = datasets.load_dataset_builder(data, config)
        check_dataset_folder(data, builder, split)
        size_shards(data, builder, split, examples)
        return builder.as_streaming_dataset(split=split)
    except MhaauditError:
        raise
    except ValueError as exc:
        msg = str(exc)
        if "split" in msg.lower():
            splits = _available_splits(msg, data, config)
            known = f"; available splits: {', '.join(splits)}" if splits else ""
            raise DataError(f"{what} dataset {label} has no split '{split}'{known}") from None
        raise DataError(f"cannot open {what} dataset {label}: {one_line(exc, 300, first_line=True)}") from None
    except (ConnectionError, TimeoutError) as exc:
        if not local:
            raise OfflineError(
                f"cannot reach the Hugging Face hub for '{data}' ({one_line(exc, 300, first_line=True)}); use "
                + instead
            ) from None
        raise DataError(f"cannot open {what} dataset {label}: {one_line(exc, 300, first_line=True)}") from None
    except Exception as exc:  # noqa: BLE001 - the datasets library raises many types; all are data problems here
        name = type(exc).__name__
        if "NotFound" in name or isinstance(exc, FileNotFoundError):
            hint = "" if local else " (check the id; gated or private datasets need `hf auth login`)"
            raise DataError(f"{what} dataset {label} not found or has no data files{hint}") from None
        if "Gated" in name or "Unauthorized" in name or "Authentication" in name:
            raise DataError(
                f"{what} dataset {label} is gated or private: accept its terms on the hub and log in "
                "with `hf auth login`"
            ) from None
        raise DataError(f"cannot open {what} dataset {label}: {one_line(exc, 300, first_line=True)}") from None


def _available_splits(message: str, data: str, config: str | None) -> list[str]:
    found = re.search(r"(?:Available splits|Should be one of)\s*:?\s*\[([^\]]*)\]", message)
    if found:
        return [s.strip().strip("'\"") for s in found.group(1).split(",") if s.strip()]
    try:
        import datasets

        return list(datasets.get_dataset_split_names(data, config))
    except Exception:  # noqa: BLE001 - the split names only improve an error message
        return []


def stream_rows(dataset, data: str):
    """Rows of a streamed dataset, as it yields them. The ``datasets`` library's own log lines are held back while it
    reads (its readers log a failure before raising it: "Failed to load JSON from file ..."), so that a failure is
    said once, in the one line of the error raised here.

    Raises:
        DataError: saying how many rows were read, when reading fails (an OSError, ValueError or KeyError of the
            reader).
        MhaauditError: a check of the data as it is read (a webdataset shard sized as the reader opens it), as raised.
    """
    from datasets.utils import logging as hf_logging

    iterator = iter(dataset)
    count = 0
    while True:
        previous = hf_logging.get_verbosity()
        hf_logging.set_verbosity(hf_logging.CRITICAL)
        try:
            row = next(iterator)
        except StopIteration:
            return
        except MhaauditError:  # a check of the data as it is read (a shard sized as the reader opens it)
            raise
        except (OSError, ConnectionError, ValueError, KeyError) as exc:
            raise DataError(
                f"reading dataset '{data}' failed after {count} rows: {one_line(exc, 300, first_line=True)}"
            ) from None
        finally:
            hf_logging.set_verbosity(previous)
        count += 1
        yield row


# Why an input was skipped, in the order reports list them.
SKIP_CAUSES = ("not RGB", "unreadable", "invalid JSON", "not UTF-8", "missing field", "empty", "too short")


class Skips:
    """The inputs a pass skipped, by cause (:data:`SKIP_CAUSES`), each with a count and its
    first example (a file name, a line number, the start of a document) and why."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.examples: dict[str, str] = {}

    def add(self, cause: str, example: str, count: int = 1) -> None:
        self.counts[cause] = self.counts.get(cause, 0) + count
        self.examples.setdefault(cause, example)

    def merge(self, other: Skips) -> None:
        for cause, count in other.counts.items():
            self.counts[cause] = self.counts.get(cause, 0) + count
            self.examples.setdefault(cause, other.examples[cause])

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def count(self, cause: str) -> int:
        return self.counts.get(cause, 0)

    def as_dict(self) -> dict:
        """``{cause: {"count": n, "example": "..."}}`` in report order."""
        order = sorted(self.counts, key=lambda c: SKIP_CAUSES.index(c) if c in SKIP_CAUSES else len(SKIP_CAUSES))
        return {c: {"count": self.counts[c], "example": self.examples[c]} for c in order}

    def describe(self) -> str:
        """``"3 not RGB (e.g. a.png: mode L), 2 unreadable (e.g. b.jpg: ...)"``, or ``""``."""
        return describe_skips(self.as_dict())

    def __bool__(self) -> bool:
        return bool(self.counts)


def describe_skips(skips: dict) -> str:
    """The words of :meth:`Skips.describe` for its ``as_dict()`` form (as results carry it)."""
    return SkipCounts.of(skips).describe()


def snippet(text: str, width: int = 40) -> str:
    """The start of a document, on one line, quoted, for an example in a report."""
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= width else flat[: width - 3] + "...")
