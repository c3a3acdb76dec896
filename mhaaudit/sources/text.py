"""Text sources: where documents come from.

Sources yield documents (str) in a deterministic order: the built-in offline corpus (the prose of
the installed packages' docstrings, :mod:`.corpus`), .txt files or folders, .jsonl files, the
containers of :mod:`.containers` (parquet, Arrow, .csv, .tsv, folders written by
``save_to_disk``), and Hugging Face datasets (streamed; ``"wikipedia"`` is the paper's data).
Turning documents into the paper's token sequences is :mod:`.examples`.
"""

from __future__ import annotations

import codecs
import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..defaults import DEFAULT_SPLIT
from ..errors import DataError, InputError, Param, one_line
from ..files import folder_files
from ._common import (
    Skips,
    classify,
    data_rng,
    is_builtin,
    is_local,
    no_split,
    open_hf_dataset,
    stream_rows,
)
from .containers import Table, choose_column, is_saved_dataset, open_table, table_of
from .corpus import docstring_corpus
from .folder_checks import data_suffix

__all__ = [
    "BuiltinText",
    "HubText",
    "JsonlText",
    "ParquetText",
    "TableText",
    "TextFiles",
    "TextSource",
    "text_source",
]

WIKIPEDIA = ("wikimedia/wikipedia", "20231101.en")
_OFFLINE_TEXT = (
    "a local .txt file or folder of .txt files, a .jsonl, .parquet, .arrow, .csv or .tsv file with a "
    "text column, a folder written by save_to_disk, or the built-in default (no " + Param("data") + ")"
)
_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_OPEN_LINE = re.compile(r"\n[ \t]*\Z")  # a text's end where a blank line may begin

#: The files of a local folder read as a data set by the ``datasets`` library (not as .txt files), by the suffix
#: of the data they hold
_FOLDER_DATA = frozenset({".parquet", ".arrow", ".jsonl", ".csv", ".tsv"})


def _dataset_file(name: str) -> bool:
    """Whether the file ``name`` in a local folder is a data set's: a table or JSON lines, compressed or not
    (``train.jsonl.gz``), or compressed text (``a.txt.gz``, which the ``datasets`` library decompresses)."""
    suffix = data_suffix(name)
    return suffix in _FOLDER_DATA or (suffix == ".txt" and not name.lower().endswith(".txt"))


class TextSource:
    """An iterable of documents (str) in a deterministic order.

    ``name`` describes the source for reports, ``skips`` holds the records the current (or last)
    pass skipped, by cause (invalid JSON, missing field, empty) with an example of each, and
    ``skipped`` their number. ``streamed`` is True for hub datasets (read lazily, possibly
    endless; ``local`` when the stream is a local folder, finite and read whole), ``sampled``
    is True when the order is itself a random sample of the source (the built-in corpus): the
    example builders read a remote stream and a sampled source only until enough documents
    qualify. ``grouped()`` yields ``(group, document)`` pairs: documents with the same non-None
    group are consecutive parts (paragraphs, modules) of one source, which the example builders
    may join when single parts are too short. ``limit`` caps the documents.
    """

    name: str
    streamed: bool = False
    local: bool = True
    sampled: bool = False

    def __init__(self, name: str, limit: int | None = None) -> None:
        self.name = name
        self.limit = limit
        self.skips = Skips()

    @property
    def skipped(self) -> int:
        """The number of records the current (or last) pass skipped."""
        return self.skips.total

    @property
    def lazy(self) -> bool:
        """Whether the example builders stop reading once enough documents qualify (a remote
        stream, or a source whose order is already a seeded sample); otherwise they read it all."""
        return self.sampled or (self.streamed and not self.local)

    def whole_sha256(self) -> str | None:
        """The SHA-256 of every document a :attr:`lazy` source holds, the same whatever its seed and however much
        of it is read, where the source holds them all already (the built-in corpus); None for every other
        source (the example builders hash what they read of a source they read whole)."""
        return None

    def _generate(self) -> Iterator[tuple[str | None, str]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def grouped(self) -> Iterator[tuple[str | None, str]]:
        """``(group, document)`` pairs in the source's order, empty documents skipped and counted, at most ``limit``.

        ``group`` names the file or part a document comes from (None when the source has none); consecutive
        documents of one group may be joined by the example builders.

        Raises:
            DataError: when the pass yields no non-empty document.
        """
        self.skips = Skips()
        count = 0
        if self.limit is not None and self.limit <= 0:
            return
        for group, doc in self._generate():
            if not doc or not doc.strip():
                self.skips.add("empty", f"document {count + self.skipped + 1}")
                continue
            yield group, doc
            count += 1
            if self.limit is not None and count >= self.limit:
                return
        if count == 0:
            raise DataError(f"{self.name}: no text documents ({self.skips.describe() or 'none found'})" + self._hint())

    def _hint(self) -> str:
        return ""

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
    sample of blocks and a run at the paper's size reads the corpus. Constructing builds (or reads
    from the cache) the corpus, and refuses an empty one (a DataError).
    """

    sampled = True

    def __init__(
        self, limit: int | None = None, seed: int = 0, packages: tuple[str, ...] | None = None, progress: bool = False
    ) -> None:
        self.corpus = docstring_corpus(packages, progress=progress)
        if not self.corpus.documents:
            raise DataError("the built-in text corpus is empty: no installed package documentation was found")
        self.seed = seed
        self.blocks = self.corpus.blocks()
        super().__init__(
            f"{self.corpus.description}; read in {len(self.blocks)} blocks of consecutive modules "
            f"in a seeded order (seed {seed})",
            limit,
        )

    def whole_sha256(self) -> str:
        """The SHA-256 of the corpus's packages and documents, in corpus order (:meth:`TextSource.whole_sha256`;
        ``Corpus.sha256``: computed once for each corpus)."""
        return self.corpus.sha256

    def _generate(self) -> Iterator[tuple[str | None, str]]:
        rng = data_rng(self.seed, 1)
        for b in rng.permutation(len(self.blocks)).tolist():
            start, stop = self.blocks[b]
            for group, _module, text in self.corpus.documents[start:stop]:
                yield f"{group}#{b}", text


#: The most characters one document of a .txt file (a paragraph: no blank line in it), or one line of a .jsonl
#: file, may hold: each is read whole, and a file's size says nothing of its longest (a sparse file of a terabyte
#: is one line of zero bytes). As a delimited file's longest row, :data:`~.containers.MAX_CSV_ROW`.
MAX_DOCUMENT_CHARS = 256 << 20

_READ_CHARS = 1 << 20  # characters read from a .txt file at a time


def _bad_byte(path: Path) -> UnicodeDecodeError | None:
    """The first place where ``path`` is not UTF-8, its ``start`` counted from the file's first byte (None when it
    is UTF-8 throughout: the file changed while read); read a block at a time."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with open(path, "rb") as fh:
        while True:
            block = fh.read(_READ_CHARS)
            held = len(decoder.getstate()[0])  # bytes of a character the last block ended inside
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as exc:
                exc.start += offset - held
                return exc
            if not block:
                return None
            offset += len(block)


def _paragraphs(path: Path) -> Iterator[str]:
    """The paragraphs of the .txt file ``path`` (split at blank lines, lines as Python splits text), read a block
    at a time: memory holds one paragraph, whatever the file's size.

    Raises:
        DataError: when the file cannot be read, is not UTF-8 (where, so that a large file can be mended), or holds
            a paragraph longer than :data:`MAX_DOCUMENT_CHARS` characters.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            blocks: list[str] = []  # the paragraph read so far, a block at a time (joined once, when it ends)
            size = 0
            carry = ""  # its end from a last line break followed only by spaces and tabs: a blank line's beginning
            while block := fh.read(_READ_CHARS):
                parts = _PARAGRAPH.split(carry + block)
                if len(parts) > 1:
                    head = "".join(blocks)
                    yield head[: len(head) - len(carry)] + parts[0]
                    yield from parts[1:-1]
                    blocks, size = [parts[-1]], len(parts[-1])
                else:
                    blocks.append(block)
                    size += len(block)
                end = _OPEN_LINE.search(carry + block if len(parts) == 1 else parts[-1])
                carry = end.group() if end else ""
                if size > MAX_DOCUMENT_CHARS:
                    raise DataError(
                        f"cannot read {path}: a document (a paragraph, no blank line in it) is longer than "
                        f"{MAX_DOCUMENT_CHARS >> 20} Mi characters, the most read whole; separate its documents "
                        "with blank lines"
                    )
            yield "".join(blocks)
    except UnicodeDecodeError:
        bad = _bad_byte(path)
        where = f" (byte {bad.start + 1}: {bad.reason})" if bad is not None else ""
        raise DataError(f"{path} is not UTF-8 text{where}") from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {one_line(exc, 300, first_line=True)}") from None


class TextFiles(TextSource):
    """A .txt file, or the .txt files under a folder (recursive, sorted); documents are separated
    by blank lines, and the documents of one file form one group. Constructing refuses a folder with
    no .txt file, a link out of the folder, a .txt name that is a named pipe or device, or folders
    nested more than :data:`~mhaaudit.files.MAX_FOLDER_DEPTH` deep (a DataError); a file that is not
    UTF-8 is refused when it is read."""

    def __init__(self, path: Path, limit: int | None = None) -> None:
        if path.is_dir():
            files = sorted(
                folder_files(path, DataError, "text folder", keep=lambda n: n.lower().endswith(".txt"), hidden=True),
                key=lambda p: p.relative_to(path).as_posix(),
            )
            if not files:
                raise DataError(f"text folder {path} holds no .txt files")
            name = (
                f"text folder {path} ({len(files)} .txt files; documents separated by blank lines, "
                "short consecutive paragraphs of a file joined)"
            )
        else:
            files = [path]
            name = f"text file {path} (documents separated by blank lines, short consecutive paragraphs joined)"
        self.files = files
        super().__init__(name, limit)

    def _generate(self) -> Iterator[tuple[str | None, str]]:
        for path in self.files:
            for part in _paragraphs(path):
                part = part.strip()
                if part:
                    yield str(path), part


_JSONL_PROBE = 1000  # lines read to find the text field when none is named


class JsonlText(TextSource):
    """One JSON object per line; the document is the field ``text_column``, else one found as
    columns are (:func:`~.containers.choose_column`: a well-known name such as text, content,
    body, else the only field holding strings) among the first lines. Lines that are not JSON
    objects (not UTF-8 included), or lack a string in that field, are skipped and counted by cause,
    each named by its line number."""

    def __init__(self, path: Path, limit: int | None = None, text_column: str | None = None) -> None:
        self.path = path
        label = f"JSON-lines file {path}"
        if text_column is None:
            probed = Skips()
            fields = self._fields(probed)
            if not fields:  # "no string column; its columns: none; choose one" would be no way out
                why = f" ({probed.describe()})" if probed else ""
                raise DataError(f"{label} holds no JSON object with fields to read the text from{why}")
            self.column, how = choose_column(label, fields, None, "text")
        else:
            self.column, how = text_column, "as asked"
        super().__init__(f"{label}, field '{self.column}' ({how})", limit)

    def _fields(self, skips: Skips | None = None) -> dict[str, str]:
        """The fields of the first lines' objects: ``"text"`` when some line has a string there (the lines that are
        not JSON counted in ``skips``)."""
        kinds: dict[str, str] = {}
        for _, (_number, record) in zip(range(_JSONL_PROBE), self._records(skips), strict=False):
            if isinstance(record, dict):
                for key, value in record.items():
                    kind = "text" if isinstance(value, str) else type(value).__name__
                    if kinds.get(key) != "text":
                        kinds[key] = kind
        return kinds

    def _records(self, skips: Skips | None) -> Iterator[tuple[int, Any]]:
        """``(line number, value)`` of each line that is JSON; a line that is not (not UTF-8 either, as JSON
        text must be) is skipped and counted in ``skips`` as invalid JSON, a blank line passed over.

        Raises:
            DataError: when the file cannot be opened, or holds a line longer than :data:`MAX_DOCUMENT_CHARS`
                characters.
        """
        try:  # lines as Python splits text (\n, \r\n or \r); a byte that is not UTF-8 kept as a lone surrogate
            handle = self.path.open(encoding="utf-8-sig", errors="surrogateescape")
        except OSError as exc:
            raise DataError(f"cannot read {self.path}: {one_line(exc, 300, first_line=True)}") from None
        with handle:
            for number in itertools.count(1):
                line = handle.readline(MAX_DOCUMENT_CHARS + 1)
                if not line:
                    return
                if len(line) > MAX_DOCUMENT_CHARS:  # read whole, as json.loads needs it: past bounding
                    raise DataError(
                        f"cannot read {self.path}: line {number} is longer than {MAX_DOCUMENT_CHARS >> 20} Mi "
                        "characters, the most read as one JSON object"
                    )
                try:
                    line.encode("utf-8")
                except UnicodeEncodeError as exc:  # the line held a byte that is not UTF-8
                    if skips is not None:
                        skips.add("invalid JSON", f"line {number}: not UTF-8 (character {exc.start + 1} of the line)")
                    continue
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as exc:
                    if skips is not None:
                        skips.add("invalid JSON", f"line {number}: {exc.msg}")
                except (RecursionError, ValueError):  # nested too deeply, or a number too long
                    if skips is not None:
                        skips.add("invalid JSON", f"line {number}: nested too deeply or too large to read")

    def _generate(self) -> Iterator[tuple[str | None, str]]:
        for number, record in self._records(self.skips):
            value = record.get(self.column) if isinstance(record, dict) else None
            if not isinstance(value, str):
                fields = ", ".join(record) if isinstance(record, dict) else type(record).__name__
                self.skips.add("missing field", f"line {number} has no string '{self.column}' (fields: {fields})")
                continue
            if not value.strip():  # counted here, where its line is known
                self.skips.add("empty", f"line {number}")
                continue
            try:  # an unpaired surrogate escape (\ud800) decodes to no character: no tokenizer takes it
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                self.skips.add(
                    "invalid JSON",
                    f"line {number}: '{self.column}' holds an unpaired surrogate escape (character {exc.start + 1})",
                )
                continue
            yield None, value

    def _hint(self) -> str:
        if self.skips.count("missing field"):
            return "; choose the field with " + Param("text_column")
        return ""


class TableText(TextSource):
    """A string column of a container (:mod:`.containers`: parquet, Arrow, .csv, .tsv, a saved
    ``Dataset`` or a split of a ``DatasetDict``): ``text_column``, else one with a well-known name
    (text, content, body, ...), else the only string column. Read whole, in the stored order."""

    def __init__(self, table: Table, limit: int | None = None, text_column: str | None = None) -> None:
        self.table = table
        self.column, how = choose_column(table.label, table.kinds, text_column, "text")
        super().__init__(f"{table.label}, column '{self.column}' ({how}; {table.rows} rows)", limit)

    def _generate(self) -> Iterator[tuple[str | None, str]]:
        for row, value in enumerate(self.table.values(self.column)):
            if isinstance(value, bytes) and self.table.kinds.get(self.column) == "text":  # a CSV value not UTF-8
                self.skips.add("not UTF-8", f"row {row}")
                continue
            if not isinstance(value, str):
                self.skips.add("missing field", f"row {row}: {'null' if value is None else type(value).__name__}")
                continue
            if not value.strip():  # counted here, where its row is known
                self.skips.add("empty", f"row {row}")
                continue
            yield None, value


class ParquetText(TableText):
    """A string column of a parquet file (:class:`TableText` of the file)."""

    def __init__(self, path: Path, limit: int | None = None, text_column: str | None = None) -> None:
        self.path = path
        super().__init__(table_of(path), limit, text_column)


class HubText(TextSource):
    """A Hugging Face dataset (hub id or local dataset folder) streamed in its own order; the
    document is the column ``text_column``, else one found as in :class:`TableText`. A remote
    stream is read only until enough documents qualify: its description says that the examples
    come from the first documents of the stream, not from a sample of the whole dataset."""

    streamed = True

    def __init__(
        self,
        data: str,
        split: str = DEFAULT_SPLIT,
        limit: int | None = None,
        text_column: str | None = None,
        config: str | None = None,
        label: str | None = None,
    ) -> None:
        dataset = open_hf_dataset(data, split=split, config=config, what="text", instead=_OFFLINE_TEXT, examples=limit)
        features = dataset.features
        self.local = is_local(data)
        how = "as asked" if text_column else "the default name: the dataset declares no columns"
        column = text_column or "text"
        if features is not None:
            kinds = {
                c: "text"
                if getattr(f, "dtype", None) in ("string", "large_string")
                else getattr(f, "dtype", None) or type(f).__name__
                for c, f in features.items()
            }
            column, how = choose_column(f"dataset '{data}'", kinds, text_column, "text")
            dataset = dataset.select_columns([column])
        self.data, self.split, self.column, self.dataset = data, split, column, dataset
        where = (f"dataset folder {data}" if self.local else f"hub dataset {data}") + (
            f" config {config}" if config else ""
        )
        order = "streamed and read whole" if self.local else "streamed in the dataset's order"
        super().__init__(label or f"{where} split {split}, column '{column}' ({how}; {order})", limit)

    def _generate(self) -> Iterator[tuple[str | None, str]]:
        for row_number, row in enumerate(stream_rows(self.dataset, self.data)):
            value = row.get(self.column)
            if not isinstance(value, str):
                self.skips.add(
                    "missing field", f"row {row_number}: no string '{self.column}' (columns: {', '.join(row)})"
                )
                continue
            yield None, value

    def _hint(self) -> str:
        return "; choose the column with " + Param("text_column") if self.skips.count("missing field") else ""


def _no_columns(text_column: str | None, what: str) -> None:
    if text_column is not None:
        raise InputError(Param("text_column") + f" has no effect on {what}: it has no columns")


def text_source(
    data: str | None = None,
    *,
    split: str = DEFAULT_SPLIT,
    limit: int | None = None,
    seed: int = 0,
    text_column: str | None = None,
    progress: bool = False,
) -> TextSource:
    """Open the text source that ``data`` names.

    ``data`` is one of: ``None`` or ``"builtin"`` (:class:`BuiltinText`, the installed packages'
    docstrings); a ``.txt`` file or a folder of them (documents separated by blank lines); a
    ``.jsonl`` file (:class:`JsonlText`); a ``.parquet``, ``.arrow``, ``.csv`` or ``.tsv`` file or a
    ``save_to_disk`` folder (:class:`TableText`); ``"wikipedia"`` (the paper's data, streamed); or
    another hub dataset id, or ``hf:`` and an id or a local dataset folder, streamed. Data with no
    text document is refused when it is read (:meth:`TextSource.grouped`).

    Args:
        data: what to read (None: the built-in text).
        split: the split of a hub dataset or a saved ``DatasetDict``.
        limit: the most documents read (None: all).
        seed: the order of the built-in corpus (other sources keep their own order).
        text_column: the column or field holding the text (None: a well-known name, else the only string column).
        progress: show the built-in corpus being built (once) on stderr.

    Returns:
        The :class:`TextSource` (the built-in corpus, a folder of .txt files, a table or a hub data set).

    Raises:
        InputError: when ``limit`` is not a positive integer, ``data`` is empty, ``text_column`` or ``split`` is
            given for data without columns or splits, or ``data`` is a file of no text kind.
        OfflineError: at once, for a hub dataset while offline.
        DataError: when ``data`` looks like a local path that does not exist, a folder holds no .txt file, a
            container cannot be read, a hub dataset cannot be opened (not found, gated, no such split), or the
            built-in corpus is empty.
    """
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise InputError(f"limit must be a positive number of documents, got {limit!r}")
    if data is None or is_builtin(data):
        _no_columns(text_column, "the built-in text")
        no_split(split, "the built-in text")
        return BuiltinText(limit=limit, seed=seed, progress=progress)
    kind, target = classify(data)
    if kind == "dir":
        if is_saved_dataset(target):
            return TableText(table_of(target, split), limit=limit, text_column=text_column)
        names = [p.name for p in target.rglob("*")]
        if not any(n.lower().endswith(".txt") for n in names) and any(map(_dataset_file, names)):
            return HubText(str(target), split=split, limit=limit, text_column=text_column)
        _no_columns(text_column, f"a folder of .txt files ({target})")
        no_split(split, f"a folder of .txt files ({target})")
        return TextFiles(target, limit=limit)
    if kind == "file":
        suffix = target.suffix.lower()
        no_split(split, f"a file ({target})")
        if suffix in {".txt", ".text", ".md"}:
            _no_columns(text_column, f"a plain text file ({target})")
            return TextFiles(target, limit=limit)
        if suffix in {".jsonl", ".ndjson"}:
            return JsonlText(target, limit=limit, text_column=text_column)
        if suffix == ".parquet":
            return ParquetText(target, limit=limit, text_column=text_column)
        table = open_table(target)
        if table is not None:
            return TableText(table, limit=limit, text_column=text_column)
        raise InputError(
            f"{target}: not a text source (give a .txt, .jsonl, .parquet, .arrow, .csv or .tsv file, a "
            "folder of .txt files, a folder written by save_to_disk, a Hugging Face dataset id, or "
            "nothing for the built-in default)"
        )
    if target.strip().lower() == "wikipedia":
        repo, config = WIKIPEDIA
        return HubText(
            repo,
            split=split,
            limit=limit,
            text_column=text_column,
            config=config,
            label=f"hub dataset {repo} config {config} split {split}, column 'text' (English Wikipedia, "
            "streamed in the dataset's order; the paper's data)",
        )
    return HubText(target, split=split, limit=limit, text_column=text_column)
