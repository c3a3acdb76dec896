"""Text sources: where documents come from.

Sources yield documents (str) in a deterministic order: the built-in offline corpus (the prose of
the installed packages' docstrings, :mod:`.corpus`), .txt files or folders, .jsonl and .parquet
files, and Hugging Face datasets (streamed; ``"wikipedia"`` is the paper's data). Turning
documents into the paper's token sequences is :mod:`.examples`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator


from ..errors import DataError, InputError, one_line
from ._common import classify, data_rng, is_builtin, is_local, open_hf_dataset, stream_rows

__all__ = [
    "TextSource",
    "BuiltinText",
    "TextFiles",
    "JsonlText",
    "ParquetText",
    "HubText",
    "text_source",
]

WIKIPEDIA = ("wikimedia/wikipedia", "20231101.en")
_OFFLINE_TEXT = ("a local .txt file or folder of .txt files, a .jsonl or .parquet file with a text "
                 "column, or the built-in default (no --data)")
_PARAGRAPH = re.compile(r"\n[ \t]*\n")


class TextSource:
    """An iterable of documents (str) in a deterministic order.

    ``name`` describes the source for reports, ``skipped`` counts the records the current (or
    last) pass skipped (empty, not text, unreadable), ``streamed`` is True for hub datasets
    (read lazily, possibly endless), ``sampled`` is True when the order is itself a random
    sample of the source (the built-in corpus): the example builders then read these two kinds
    only until enough documents qualify. ``grouped()`` yields ``(group, document)`` pairs:
    documents with the same non-None group are consecutive parts (paragraphs, modules) of one
    source, which the example builders may join when single parts are too short. ``limit`` caps
    the documents.
    """

    name: str
    skipped: int
    streamed: bool = False
    sampled: bool = False

    def __init__(self, name: str, limit: int | None = None) -> None:
        self.name = name
        self.limit = limit
        self.skipped = 0

    def _generate(self) -> Iterator[tuple[str | None, str]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def grouped(self) -> Iterator[tuple[str | None, str]]:
        self.skipped = 0
        count = 0
        if self.limit is not None and self.limit <= 0:
            return
        for group, doc in self._generate():
            if not doc or not doc.strip():
                self.skipped += 1
                continue
            yield group, doc
            count += 1
            if self.limit is not None and count >= self.limit:
                return
        if count == 0:
            raise DataError(f"{self.name}: no text documents ({self.skipped} skipped)")

    def __iter__(self) -> Iterator[str]:
        for _, doc in self.grouped():
            yield doc

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class BuiltinText(TextSource):
    """The built-in corpus (:func:`~mhaaudit.sources.corpus.docstring_corpus`): one document
    per module of the installed packages' documentation.

    The corpus is cut into blocks of consecutive modules of one package (at least
    :data:`~mhaaudit.sources.corpus.BLOCK_WORDS` words each, or one longer module), and the
    blocks are read in a random order drawn from ``derive_seed(seed, "data", 1)``; the modules of
    a block are consecutive parts of one group, so the example builders may join short modules
    within a block. Reading stops once enough documents qualify, so a small run reads a random
    sample of blocks and a run at the paper's size reads the corpus.
    """

    sampled = True

    def __init__(self, limit: int | None = None, seed: int = 0, packages: tuple[str, ...] | None = None,
                 progress: bool = False) -> None:
        from .corpus import docstring_corpus

        self.corpus = docstring_corpus(packages, progress=progress)
        if not self.corpus.documents:
            raise DataError("the built-in text corpus is empty: no installed package documentation was found")
        self.seed = seed
        self.blocks = self.corpus.blocks()
        super().__init__(f"{self.corpus.description}; read in {len(self.blocks)} blocks of consecutive modules "
                         f"in a seeded order (seed {seed})", limit)

    def _generate(self) -> Iterator[tuple[str | None, str]]:
        rng = data_rng(self.seed, 1)
        for b in rng.permutation(len(self.blocks)).tolist():
            start, stop = self.blocks[b]
            for group, _module, text in self.corpus.documents[start:stop]:
                yield f"{group}#{b}", text


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {one_line(exc, 300, first_line=True)}") from None


class TextFiles(TextSource):
    """A .txt file, or the .txt files under a folder (recursive, sorted); documents are separated
    by blank lines, and the documents of one file form one group."""

    def __init__(self, path: Path, limit: int | None = None) -> None:
        if path.is_dir():
            files = sorted(
                (p for p in path.rglob("*") if p.suffix.lower() == ".txt" and p.is_file()),
                key=lambda p: p.relative_to(path).as_posix(),
            )
            if not files:
                raise DataError(f"text folder {path} holds no .txt files")
            name = f"text folder {path} ({len(files)} .txt files; documents separated by blank lines)"
        else:
            files = [path]
            name = f"text file {path} (documents separated by blank lines)"
        self.files = files
        super().__init__(name, limit)

    def _generate(self) -> Iterator[tuple[str | None, str]]:
        for path in self.files:
            for part in _PARAGRAPH.split(_read_text(path)):
                part = part.strip()
                if part:
                    yield str(path), part


class JsonlText(TextSource):
    """One JSON object per line; the document is its ``text`` field (or ``text_column``). Lines
    that are not JSON objects with a string there are skipped."""

    def __init__(self, path: Path, limit: int | None = None, text_column: str | None = None) -> None:
        self.path = path
        self.column = text_column or "text"
        super().__init__(f"JSON-lines file {path}, field '{self.column}'", limit)

    def _generate(self) -> Iterator[tuple[str | None, str]]:
        try:
            handle = self.path.open(encoding="utf-8")
        except OSError as exc:
            raise DataError(f"cannot read {self.path}: {one_line(exc, 300, first_line=True)}") from None
        with handle:
            try:
                for line in handle:
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        self.skipped += 1
                        continue
                    value = record.get(self.column) if isinstance(record, dict) else None
                    if not isinstance(value, str):
                        self.skipped += 1
                        continue
                    yield None, value
            except UnicodeDecodeError:
                raise DataError(f"{self.path} is not UTF-8 text") from None


class ParquetText(TextSource):
    """A string column (``text`` or ``text_column``) of a parquet file."""

    def __init__(self, path: Path, limit: int | None = None, text_column: str | None = None) -> None:
        import pyarrow.parquet as pq

        try:
            meta = pq.ParquetFile(path)
        except Exception as exc:
            raise DataError(f"cannot read parquet file {path}: {one_line(exc, 300, first_line=True)}") from None
        names = list(meta.schema_arrow.names)
        column = text_column or "text"
        if column not in names:
            error = InputError if text_column else DataError
            raise error(f"parquet file {path} has no column '{column}'; its columns: {', '.join(names)}"
                        + ("" if text_column else " (name one with text_column)"))
        self.path, self.column = path, column
        super().__init__(f"parquet file {path}, column '{column}' ({meta.metadata.num_rows} rows)", limit)

    def _generate(self) -> Iterator[tuple[str | None, str]]:
        import pyarrow.parquet as pq

        try:
            for batch in pq.ParquetFile(self.path).iter_batches(batch_size=256, columns=[self.column]):
                for value in batch.column(0).to_pylist():
                    if not isinstance(value, str):
                        self.skipped += 1
                        continue
                    yield None, value
        except OSError as exc:
            raise DataError(f"reading parquet file {self.path} failed: {one_line(exc, 300, first_line=True)}") from None


class HubText(TextSource):
    """A Hugging Face dataset (hub id or local dataset folder) streamed in its own order; the
    document is the ``text`` column (or ``text_column``)."""

    streamed = True

    def __init__(self, data: str, split: str = "train", limit: int | None = None,
                 text_column: str | None = None, config: str | None = None, label: str | None = None) -> None:
        dataset = open_hf_dataset(data, split=split, config=config, what="text", instead=_OFFLINE_TEXT)
        column = text_column or "text"
        features = dataset.features
        if features is not None:
            if column not in features:
                error = InputError if text_column else DataError
                raise error(f"dataset '{data}' has no column '{column}'; its columns: {', '.join(features)}"
                            + ("" if text_column else " (name one with text_column)"))
            dataset = dataset.select_columns([column])
        self.data, self.split, self.column, self.dataset = data, split, column, dataset
        where = (f"dataset folder {data}" if is_local(data) else f"hub dataset {data}") + (
            f" config {config}" if config else "")
        super().__init__(label or f"{where} split {split}, column '{column}' (streamed)", limit)

    def _generate(self) -> Iterator[tuple[str | None, str]]:
        for row in stream_rows(self.dataset, self.data):
            value = row.get(self.column)
            if not isinstance(value, str):
                self.skipped += 1
                continue
            yield None, value


def text_source(data: str | None = None, *, split: str = "train", limit: int | None = None, seed: int = 0,
                text_column: str | None = None, progress: bool = False) -> TextSource:
    """The text source that ``data`` names.

    - ``None`` or ``"builtin"``: the prose of the installed packages' docstrings, read in a
      seeded order (:class:`BuiltinText`);
    - a ``.txt`` file or a folder of ``.txt`` files (documents separated by blank lines);
    - a ``.jsonl`` file (field ``text`` or ``text_column``); a ``.parquet`` file (same column rule);
    - ``"wikipedia"``: the hub dataset ``wikimedia/wikipedia``, config ``20231101.en``, streamed
      (the paper's data);
    - any other hub dataset id (or ``hf:<id or local dataset folder>``), streamed, column ``text``.

    ``limit`` caps the number of documents. ``seed`` orders the built-in corpus; the other
    sources keep their own order. ``progress``: building the built-in corpus (once) shows on stderr. Raises OfflineError at once for a hub
    dataset while offline, DataError for missing or empty data, InputError for bad arguments.
    """
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise InputError(f"limit must be a positive number of documents, got {limit!r}")
    if is_builtin(data):
        return BuiltinText(limit=limit, seed=seed, progress=progress)
    kind, target = classify(data)
    if kind == "dir":
        if not any(p.suffix.lower() == ".txt" for p in target.rglob("*")) and any(
            p.suffix.lower() in {".parquet", ".arrow", ".jsonl"} for p in target.rglob("*")
        ):
            return HubText(str(target), split=split, limit=limit, text_column=text_column)
        return TextFiles(target, limit=limit)
    if kind == "file":
        suffix = target.suffix.lower()
        if suffix in {".txt", ".text", ".md"}:
            return TextFiles(target, limit=limit)
        if suffix in {".jsonl", ".ndjson"}:
            return JsonlText(target, limit=limit, text_column=text_column)
        if suffix == ".parquet":
            return ParquetText(target, limit=limit, text_column=text_column)
        raise InputError(f"{target}: not a text source (give a .txt, .jsonl or .parquet file, a folder "
                         "of .txt files, a Hugging Face dataset id, or nothing for the built-in default)")
    if target.strip().lower() == "wikipedia":
        repo, config = WIKIPEDIA
        return HubText(repo, split=split, limit=limit, text_column=text_column, config=config,
                       label=f"hub dataset {repo} config {config} split {split} (English Wikipedia, "
                             "streamed; the paper's data)")
    return HubText(target, split=split, limit=limit, text_column=text_column)
