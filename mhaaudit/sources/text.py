"""Text sources and the paper's two ways of turning documents into token sequences.

Sources yield documents (str) in a deterministic order: the built-in offline corpus, .txt files
or folders, .jsonl and .parquet files, and Hugging Face datasets (streamed). The example builders
follow the paper's protocol (Appendix J):

- :func:`bert_pair_examples`: ``[CLS] s1 [SEP] s2`` of exactly n tokens, next-sentence style;
- :func:`gpt_window_examples`: n consecutive tokens of a document with at least 1.5 n tokens.

Both return :class:`TextExamples`. Every example is distinct (repeated draws are redrawn): two
identical examples would make every query subset that holds both dependent.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..errors import DataError, InputError, one_line
from ._common import classify, data_rng, is_builtin, is_local, open_hf_dataset, stream_rows
from .tokenizers import FallbackTokenizer, offline_tokenizer

__all__ = [
    "TextSource",
    "BuiltinText",
    "TextFiles",
    "JsonlText",
    "ParquetText",
    "HubText",
    "TextExamples",
    "text_source",
    "bert_pair_examples",
    "gpt_window_examples",
    "FallbackTokenizer",
    "offline_tokenizer",
]

WIKIPEDIA = ("wikimedia/wikipedia", "20231101.en")
_OFFLINE_TEXT = ("a local .txt file or folder of .txt files, a .jsonl or .parquet file with a text "
                 "column, or the built-in default (no --data)")
_PARAGRAPH = re.compile(r"\n[ \t]*\n")
# Reading a streamed source stops after this many documents when too few qualify.
_STREAM_READ_FACTOR = 20
_STREAM_READ_MIN = 10_000


class TextSource:
    """An iterable of documents (str) in a deterministic order.

    ``name`` describes the source for reports, ``skipped`` counts the records the current (or
    last) pass skipped (empty, not text, unreadable), ``streamed`` is True for hub datasets
    (read lazily, possibly endless). ``grouped()`` yields ``(group, document)`` pairs: documents
    with the same non-None group are consecutive parts (paragraphs) of one source, which the
    example builders may join when single parts are too short. ``limit`` caps the documents.
    """

    name: str
    skipped: int
    streamed: bool = False

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
    """The help topics of the Python language reference in the standard library
    (``pydoc_data.topics.topics``), sorted by topic name; each topic is one document (its
    paragraphs joined), and all topics count as one source, so consecutive topics may be joined."""

    def __init__(self, limit: int | None = None) -> None:
        from pydoc_data.topics import topics

        self._topics = [(key, topics[key].strip()) for key in sorted(topics)]
        paragraphs = sum(len([p for p in _PARAGRAPH.split(t) if p.strip()]) for _, t in self._topics)
        words = sum(len(t.split()) for _, t in self._topics)
        super().__init__(
            f"built-in: the {len(self._topics)} help topics of the Python language reference in the "
            f"standard library (pydoc_data.topics: {paragraphs} paragraphs, {words} words; each topic "
            "joined into one document; offline default)",
            limit,
        )

    def _generate(self) -> Iterator[tuple[str | None, str]]:
        for _, text in self._topics:
            yield "pydoc_data.topics", text


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
                text_column: str | None = None) -> TextSource:
    """The text source that ``data`` names.

    - ``None`` or ``"builtin"``: the standard library's Python reference help topics
      (:class:`BuiltinText`);
    - a ``.txt`` file or a folder of ``.txt`` files (documents separated by blank lines);
    - a ``.jsonl`` file (field ``text`` or ``text_column``); a ``.parquet`` file (same column rule);
    - ``"wikipedia"``: the hub dataset ``wikimedia/wikipedia``, config ``20231101.en``, streamed
      (the paper's data);
    - any other hub dataset id (or ``hf:<id or local dataset folder>``), streamed, column ``text``.

    ``limit`` caps the number of documents. ``seed`` is accepted for symmetry with
    :func:`image_source`; text sources keep their own order. Raises OfflineError at once for a hub
    dataset while offline, DataError for missing or empty data, InputError for bad arguments.
    """
    del seed  # documents keep the source's order; the example builders do the sampling
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise InputError(f"limit must be a positive number of documents, got {limit!r}")
    if is_builtin(data):
        return BuiltinText(limit=limit)
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


# ----------------------------------------------------------------------------------- examples


@dataclass
class TextExamples:
    """Token-id sequences built from documents, with how they were made.

    ``ids``: one list of exactly n token ids per example. ``is_next``: for BERT pairs, True when
    s2 continues s1 in the same document, False when s2 was cut from another document; None for
    GPT windows. ``description``: plain words for the report. ``doc_index``: the (possibly
    joined) document each example (its s1) was cut from, an index into the qualifying documents;
    ``starts``: the token offset of the example (of s1) in that document; ``s1_lengths``: len(s1)
    for BERT pairs (the [SEP] sits at position ``s1_lengths[i] + 1``), None for GPT windows.
    """

    ids: list[list[int]]
    is_next: list[bool] | None
    description: str
    doc_index: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    s1_lengths: list[int] | None = None

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class _Corpus:
    docs: list[list[int]]  # token ids of each qualifying document
    read: int  # documents read from the source
    joined: int  # qualifying documents made by joining consecutive parts of one source
    too_short: int  # documents (or leftover parts) dropped because they stayed too short
    source_name: str


def _encode(tokenizer: Any, text: str) -> list[int]:
    out = tokenizer(text, add_special_tokens=False)
    ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
    return [int(i) for i in ids]


class _quiet_transformers:
    """Silence the 'sequence longer than the model maximum' warning while tokenizing documents."""

    def __enter__(self):
        self.previous = None
        try:
            from transformers.utils import logging as hf_logging
        except Exception:  # pragma: no cover - transformers is a dependency
            return self
        self.hf_logging = hf_logging
        self.previous = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            self.hf_logging.set_verbosity(self.previous)
        return False


def _grouped(docs: Any) -> tuple[Iterator[tuple[str | None, str]], bool, str]:
    if isinstance(docs, TextSource):
        return docs.grouped(), docs.streamed, docs.name
    if isinstance(docs, str):
        raise InputError("docs must be a sequence of documents or a TextSource, not one string")
    if not isinstance(docs, Iterable):
        raise InputError(f"docs must be a sequence of documents or a TextSource, got {type(docs).__name__}")
    size = len(docs) if isinstance(docs, Sequence) else None
    name = f"{size} given documents" if size is not None else "the given documents"
    return ((None, d) for d in docs if isinstance(d, str) and d.strip()), False, name


def _collect(docs: Any, tokenizer: Any, min_tokens: int, wanted: int, drop: set[int]) -> _Corpus:
    """Tokenize documents; keep those with at least ``min_tokens`` tokens; join runs of shorter
    consecutive documents of the same group until they are long enough. A streamed source is read
    only until ``wanted`` documents qualify (or a read cap is hit)."""
    stream, streamed, source_name = _grouped(docs)
    cap = max(_STREAM_READ_FACTOR * wanted, _STREAM_READ_MIN) if streamed else None
    out: list[list[int]] = []
    read = joined = too_short = 0
    pending: list[int] = []
    pending_group: str | None = None
    pending_parts = 0

    def flush() -> None:
        nonlocal pending, pending_parts, too_short
        if pending_parts:
            too_short += pending_parts
        pending, pending_parts = [], 0

    with _quiet_transformers():
        for group, text in stream:
            read += 1
            ids = _encode(tokenizer, text)
            if drop:
                ids = [i for i in ids if i not in drop]
            if len(ids) >= min_tokens:
                flush()
                out.append(ids)
            elif group is None:
                flush()
                too_short += 1
            else:
                if pending_parts and group != pending_group:
                    flush()
                pending_group = group
                pending = pending + ids
                pending_parts += 1
                if len(pending) >= min_tokens:
                    out.append(pending)
                    joined += 1
                    pending, pending_parts = [], 0
            if streamed and (len(out) >= wanted or read >= cap):
                break
        flush()
    return _Corpus(out, read, joined, too_short, source_name)


def _check_common(n: int, count: int, seed: int) -> None:
    for label, value in (("n", n), ("count", count), ("seed", seed)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise InputError(f"{label} must be an integer, got {value!r}")
    if count < 1:
        raise InputError(f"count must be at least 1, got {count}")


def _key(ids: list[int]) -> bytes:
    return hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=16).digest()


def _corpus_words(corpus: _Corpus, min_tokens: int, what: str) -> str:
    joined = (f", {corpus.joined} of them made by joining consecutive paragraphs/documents of the "
              "same source" if corpus.joined else "")
    return (f"{len(corpus.docs)} {what} with at least {min_tokens} tokens{joined} "
            f"(of {corpus.read} documents read from {corpus.source_name})")


def _doc_picker(rng: np.random.Generator, n_docs: int, count: int):
    """Documents for successive examples: all different while there are enough documents
    (one example per document, as the paper did), else uniform with replacement."""
    order = iter(rng.permutation(n_docs).tolist()) if n_docs >= count else iter(())

    def pick() -> int:
        # once the permutation is used up (only after rare repeated examples), reuse documents
        d = next(order, None)
        return int(rng.integers(n_docs)) if d is None else d

    return pick


def gpt_window_examples(docs: Sequence[str] | TextSource, tokenizer: Any, n: int, count: int,
                        seed: int = 0) -> TextExamples:
    """The paper's GPT-2 inputs: ``count`` windows of ``n`` consecutive tokens, each from a
    document with at least 1.5 n tokens, at a uniform random start (``numpy`` generator seeded
    with ``derive_seed(seed, "data")``).

    Documents of one source that are individually too short (e.g. paragraphs of a .txt file or
    the built-in corpus) are joined with their consecutive neighbours until long enough; the
    description says how many were. With at least ``count`` qualifying documents each example
    comes from a different document; otherwise documents are reused with distinct windows.
    Raises DataError when fewer than ``count`` distinct windows are possible.
    """
    _check_common(n, count, seed)
    if n < 1:
        raise InputError(f"n must be at least 1, got {n}")
    min_tokens = math.ceil(1.5 * n)
    corpus = _collect(docs, tokenizer, min_tokens, count, set())
    lengths = [len(d) for d in corpus.docs]
    possible = sum(length - n + 1 for length in lengths)
    words = _corpus_words(corpus, min_tokens, "documents")
    if possible < count:
        raise DataError(f"only {possible} distinct {n}-token windows are possible from {words}; "
                        f"{count} were asked for (use more text or a smaller count)")
    rng = data_rng(seed)
    pick = _doc_picker(rng, len(lengths), count)
    # When most of the possible windows are needed, draw from the full list of them (without
    # replacement), so that random redraws cannot fail to find the last free ones.
    pool = None
    if len(lengths) < count and 4 * count > possible:
        pool = [(d, s) for d, length in enumerate(lengths) for s in range(length - n + 1)]
        pool = [pool[i] for i in rng.permutation(len(pool))]
    ids: list[list[int]] = []
    doc_index: list[int] = []
    starts: list[int] = []
    seen: set[bytes] = set()
    used: set[tuple[int, int]] = set()
    attempts = 0
    max_attempts = 20 * count + 1000
    while len(ids) < count:
        attempts += 1
        if attempts > max_attempts or (pool is not None and attempts > len(pool)):
            raise DataError(f"could build only {len(ids)} distinct {n}-token windows from {words}; "
                            f"{count} were asked for")
        if pool is not None:
            d, start = pool[attempts - 1]
        else:
            d = pick()
            start = int(rng.integers(lengths[d] - n + 1))
        if (d, start) in used:
            continue
        used.add((d, start))
        window = corpus.docs[d][start:start + n]
        key = _key(window)
        if key in seen:
            continue
        seen.add(key)
        ids.append(window)
        doc_index.append(d)
        starts.append(start)
    reuse = "one per document" if len(lengths) >= count else "documents reused with distinct windows"
    description = (
        f"{count} GPT-style windows of {n} consecutive tokens ({reuse}, uniform random starts, seed {seed}) "
        f"from {words}"
    )
    return TextExamples(ids, None, description, doc_index, starts, None)


def bert_pair_examples(docs: Sequence[str] | TextSource, tokenizer: Any, n: int, count: int,
                       seed: int = 0) -> TextExamples:
    """The paper's BERT inputs: ``[CLS] s1 [SEP] s2`` of exactly ``n`` token ids.

    For each example (``numpy`` generator seeded with ``derive_seed(seed, "data")``): len(s1) is
    uniform in [5, n - 7) (the paper's [5, n-2-5)); s2 has the remaining n - 2 - len(s1) tokens; with
    probability 0.5 s2 continues s1 in the same document (``is_next`` True), else it is cut at a
    random place from another random document (``is_next`` False). s1 and s2 come from documents
    with at least n - 2 tokens; shorter consecutive parts of one source are joined first. [CLS]
    and [SEP] ids come from ``tokenizer.cls_token_id`` / ``sep_token_id`` and are removed from
    the documents' own tokens, so each example holds exactly one [SEP], at ``len(s1) + 1``.
    Returns :class:`TextExamples`; DataError when too few documents or distinct examples exist.
    """
    _check_common(n, count, seed)
    if n < 13:
        raise InputError(f"BERT-style pairs need n of at least 13 (len(s1) is drawn from [5, n-7)), got {n}")
    cls_id = getattr(tokenizer, "cls_token_id", None)
    sep_id = getattr(tokenizer, "sep_token_id", None)
    if cls_id is None or sep_id is None:
        raise InputError("the tokenizer has no [CLS]/[SEP] token ids; BERT-style pairs need both")
    cls_id, sep_id = int(cls_id), int(sep_id)
    body = n - 2
    corpus = _collect(docs, tokenizer, body, count, {cls_id, sep_id})
    lengths = [len(d) for d in corpus.docs]
    words = _corpus_words(corpus, body, "documents")
    if len(lengths) < 2:
        raise DataError(f"BERT-style pairs need at least 2 documents with at least {body} tokens; "
                        f"found {words}")
    possible = sum(length - body + 1 for length in lengths)
    if possible < count:
        raise DataError(f"only about {possible} distinct {n}-token pairs are possible from {words}; "
                        f"{count} were asked for (use more text or a smaller count)")
    rng = data_rng(seed)
    pick = _doc_picker(rng, len(lengths), count)
    ids: list[list[int]] = []
    is_next: list[bool] = []
    doc_index: list[int] = []
    starts: list[int] = []
    s1_lengths: list[int] = []
    seen: set[bytes] = set()
    attempts = 0
    max_attempts = 20 * count + 1000
    while len(ids) < count:
        attempts += 1
        a = pick()
        if attempts > max_attempts:
            raise DataError(f"could build only {len(ids)} distinct {n}-token pairs from {words}; "
                            f"{count} were asked for")
        s1_len = int(rng.integers(5, n - 7))
        s2_len = body - s1_len
        nxt = bool(rng.random() < 0.5)
        doc_a = corpus.docs[a]
        if nxt:
            start = int(rng.integers(lengths[a] - body + 1))
            s1 = doc_a[start:start + s1_len]
            s2 = doc_a[start + s1_len:start + body]
        else:
            start = int(rng.integers(lengths[a] - s1_len + 1))
            s1 = doc_a[start:start + s1_len]
            b = int(rng.integers(len(lengths) - 1))
            b += b >= a
            cut = int(rng.integers(lengths[b] - s2_len + 1))
            s2 = corpus.docs[b][cut:cut + s2_len]
        example = [cls_id, *s1, sep_id, *s2]
        key = _key(example)
        if key in seen:
            continue
        seen.add(key)
        ids.append(example)
        is_next.append(nxt)
        doc_index.append(a)
        starts.append(start)
        s1_lengths.append(s1_len)
    k = sum(is_next)
    reuse = "one per document" if len(lengths) >= count else "documents reused"
    description = (
        f"{count} BERT-style '[CLS] s1 [SEP] s2' pairs of exactly {n} tokens (seed {seed}; len(s1) uniform "
        f"in [5, {n - 7}); s2 continues s1 in the same document for {k}, cut from another random "
        f"document for {count - k}; {reuse}) from {words}"
    )
    return TextExamples(ids, is_next, description, doc_index, starts, s1_lengths)
