"""The paper's two ways of turning documents into token sequences (Appendix J).

- :func:`bert_pair_examples`: ``[CLS] s1 [SEP] s2`` of exactly n tokens, next-sentence style;
- :func:`gpt_window_examples`: n consecutive tokens of a document with at least 1.5 n tokens;
  no two windows overlap (their token spans are disjoint), so no two examples share text.

Both take documents (a :class:`~mhaaudit.sources.text.TextSource` or a sequence of strings) and
a tokenizer, and return :class:`TextExamples`. Every example is distinct (a candidate that
repeats an earlier example's tokens is redrawn and counted in ``repeats``; ``distinct=False``
keeps it): two identical examples would make every query subset that holds both dependent. The
random choices come from ``numpy.random.default_rng(derive_seed(seed, "data"))``.
"""

from __future__ import annotations

import hashlib
import math
import re
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import validate
from ..errors import DataError, InputError
from ._common import Skips, data_rng, snippet
from .duplicates import DuplicateFinder, sequence_key
from .text import TextSource

__all__ = ["TextExamples", "bert_pair_examples", "gpt_window_examples"]

# Reading a streamed source stops after this many documents when too few qualify.
_STREAM_READ_FACTOR = 20
_STREAM_READ_MIN = 10_000


@dataclass
class TextExamples:
    """Token-id sequences built from documents, with how they were made.

    ``ids``: one list of exactly n token ids per example. ``is_next``: for BERT pairs, True when
    s2 continues s1 in the same document, False when s2 was cut from another document; None for
    GPT windows. ``description``: plain words for the report. ``doc_index``: the (possibly
    joined) document each example (its s1) was cut from, an index into the qualifying documents;
    ``starts``: the token offset of the example (of s1) in that document; ``s1_lengths``: len(s1)
    for BERT pairs (the [SEP] sits at position ``s1_lengths[i] + 1``), None for GPT windows;
    ``repeats``: candidates that repeated an earlier example's tokens exactly (redrawn, or kept
    when the builder was asked not to insist on distinct examples); ``skips``: the documents
    skipped, by cause (the source's, and those too short), each with a count and an example;
    ``corpus_sha256``: when the builder was asked for it (``corpus_digest``), the SHA-256 of the documents
    the examples were drawn from, the same for every seed (None for a stream read only in part).
    """

    ids: list[list[int]]
    is_next: list[bool] | None
    description: str
    doc_index: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    s1_lengths: list[int] | None = None
    repeats: int = 0
    skips: dict = field(default_factory=dict)  # documents skipped, by cause (sources.Skips.as_dict())
    corpus_sha256: str | None = None

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class _Corpus:
    docs: list[array]  # token ids of each qualifying document
    read: int  # documents read from the source
    joined: int  # qualifying documents made by joining consecutive parts of one source
    too_short: int  # documents (or leftover parts) dropped because they stayed too short
    source_name: str
    skips: Skips = field(default_factory=Skips)  # what the source skipped, and the too-short documents
    stopped: bool = False  # a remote stream read only until enough documents qualified
    sha256: str | None = None  # asked for: the documents' digest, the same whatever the seed (_documents_sha256)


# A document longer than twice this many characters is tokenized in pieces of about this size: a tokenizer
# holds some hundreds of bytes per character of the text it is given (a 3 MB paragraph made 0.45 GB).
_PIECE_CHARS = 1 << 16
# Each cut between pieces is checked on this many characters either side (see _cut_holds).
_CUT_CHECK_CHARS = 1 << 10
# Cuts tried after one that fails, before the document is tokenized whole.
_CUT_TRIES = 4


def _encode_whole(tokenizer: Any, text: str) -> list[int]:
    out = tokenizer(text, add_special_tokens=False)
    ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
    return [int(i) for i in ids]


# A space between two non-space characters: a cut is made just before it.
_CUT = re.compile(r"(?<=\S) (?=\S)")


def _next_cut(text: str, at: int) -> int:
    """The first place at or after ``at`` that holds a space between two non-space characters, or
    ``len(text)`` when there is none."""
    found = _CUT.search(text, at)
    return found.start() if found else len(text)


def _cut_holds(tokenizer: Any, text: str, cut: int) -> int | None:
    """How ``text`` may be cut at ``cut`` and give, around the cut, the tokens it gives uncut, checked on the
    characters within :data:`_CUT_CHECK_CHARS` either side (tokenized together, and apart): 0 when the piece after
    the cut begins with its space; 1 when it begins after it, for a tokenizer that marks the start of every text it
    is given (a SentencePiece normalizer that prepends its word mark reads that mark where the space was); None
    when neither gives the same ids. Tokenizers that split text at spaces before anything else (WordPiece,
    byte-level BPE) give 0; one that joins text across spaces shows it here."""
    left = text[max(0, cut - _CUT_CHECK_CHARS) : cut]
    right = text[cut : cut + _CUT_CHECK_CHARS]
    together, head = _encode_whole(tokenizer, left + right), _encode_whole(tokenizer, left)
    for skip in (0, 1):
        if head + _encode_whole(tokenizer, right[skip:]) == together:
            return skip
    return None


def _held_cut(tokenizer: Any, text: str, at: int) -> tuple[int, int] | None:
    """The first place to cut ``text`` at or after ``at`` that holds, among the first :data:`_CUT_TRIES` spaces
    between words, with the characters the next piece skips there (:func:`_cut_holds`); ``(len(text), 0)`` when
    no such space is left, None when none holds."""
    for _ in range(_CUT_TRIES):
        cut = _next_cut(text, at)
        if cut == len(text):
            return cut, 0
        skip = _cut_holds(tokenizer, text, cut)
        if skip is not None:
            return cut, skip
        at = cut + 1
    return None


def _encode(tokenizer: Any, text: str) -> array:
    """The token ids of ``text`` (a compact array of 8-byte integers), tokenized in pieces of about
    :data:`_PIECE_CHARS` characters when it is long: each cut is a space between two words, checked by
    :func:`_cut_holds`; where no cut holds, the text is tokenized whole. So the ids are those of the whole text."""
    out = array("q")
    start = 0
    while len(text) - start > 2 * _PIECE_CHARS:
        held = _held_cut(tokenizer, text, start + _PIECE_CHARS)
        if held is None:  # the tokenizer joins text across spaces here
            return array("q", _encode_whole(tokenizer, text))
        cut, skip = held
        out.extend(_encode_whole(tokenizer, text[start:cut]))
        start = cut + skip
    if start < len(text):
        out.extend(_encode_whole(tokenizer, text[start:]))
    return out


class _quiet_transformers:
    """Silence the 'sequence longer than the model maximum' warning while tokenizing documents."""

    def __enter__(self):
        self.previous = None
        try:
            from transformers.utils import logging as hf_logging
        except Exception:  # noqa: BLE001  # pragma: no cover - transformers is a dependency
            return self
        self.hf_logging = hf_logging
        self.previous = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            self.hf_logging.set_verbosity(self.previous)
        return False


def _grouped(docs: Any) -> tuple[Iterator[tuple[str | None, str]], TextSource | None, str]:
    if isinstance(docs, TextSource):
        return docs.grouped(), docs, docs.name
    if isinstance(docs, str):
        raise InputError("docs must be a sequence of documents or a TextSource, not one string")
    if not isinstance(docs, Iterable):
        raise InputError(f"docs must be a sequence of documents or a TextSource, got {type(docs).__name__}")
    size = len(docs) if isinstance(docs, Sequence) else None
    name = f"{size} given documents" if size is not None else "the given documents"
    return ((None, d) for d in docs if isinstance(d, str) and d.strip()), None, name


def _collect(docs: Any, tokenizer: Any, min_tokens: int, wanted: int, drop: set[int], digest: bool) -> _Corpus:
    """Tokenize documents; keep those with at least ``min_tokens`` tokens; join runs of shorter
    consecutive documents of the same group until they are long enough. A remote stream or a
    sampled source is read only until ``wanted`` documents qualify (a stream also until a read
    cap); every other source is read whole. Documents left too short are counted in ``skips``.
    ``digest``: the corpus's ``sha256`` is computed (:func:`_documents_sha256`)."""
    stream, source, source_name = _grouped(docs)
    lazy = source is not None and source.lazy
    remote = source is not None and source.streamed and not source.local
    cap = max(_STREAM_READ_FACTOR * wanted, _STREAM_READ_MIN) if remote else None
    out: list[array] = []
    read = joined = too_short = 0
    pending = array("q")
    pending_group: str | None = None
    pending_parts = 0
    pending_first = ""
    short = Skips()
    stopped = False

    def flush() -> None:
        nonlocal pending, pending_parts, too_short
        if pending_parts:
            too_short += pending_parts
            short.add(
                "too short",
                f"{pending_first} ({len(pending)} tokens in {pending_parts} joined parts, {min_tokens} needed)"
                if pending_parts > 1
                else f"{pending_first} ({len(pending)} tokens, {min_tokens} needed)",
                pending_parts,
            )
        pending, pending_parts = array("q"), 0

    with _quiet_transformers():
        for group, text in stream:
            read += 1
            ids = _encode(tokenizer, text)
            if drop:
                ids = array("q", (i for i in ids if i not in drop))
            if len(ids) >= min_tokens:
                flush()
                out.append(ids)
            elif group is None:
                flush()
                too_short += 1
                short.add("too short", f"{snippet(text)} ({len(ids)} tokens, {min_tokens} needed)")
            else:
                if pending_parts and group != pending_group:
                    flush()
                pending_group = group
                if not pending_parts:
                    pending_first = snippet(text)
                pending.extend(ids)
                pending_parts += 1
                if len(pending) >= min_tokens:
                    out.append(pending)
                    joined += 1
                    pending, pending_parts = array("q"), 0
            if lazy and (len(out) >= wanted or (cap is not None and read >= cap)):
                stopped = remote
                break
        flush()
    skips = Skips()
    if source is not None:
        skips.merge(source.skips)
    skips.merge(short)
    sha256 = _documents_sha256(out, source) if digest else None
    return _Corpus(out, read, joined, too_short, source_name, skips, stopped, sha256)


def _documents_sha256(docs: list[array], source: TextSource | None) -> str | None:
    """The SHA-256 of the documents an example builder draws from, the same whatever the data seed: the token ids
    of each qualifying document ``docs``, in order, for a source read whole; a lazy source's own digest of what
    it holds (:meth:`TextSource.whole_sha256`: the built-in corpus's; None for a stream)."""
    if source is not None and source.lazy:
        return source.whole_sha256()
    h = hashlib.sha256(b"token ids\0")
    for ids in docs:
        h.update(len(ids).to_bytes(8, "little") + ids.tobytes())
    return h.hexdigest()


def _check_common(n: int, count: int, seed: int) -> tuple[int, int, int]:
    return (
        validate.integer("n", n, minimum=None),
        validate.integer("count", count),
        validate.integer("seed", seed, minimum=None),
    )


def _corpus_words(corpus: _Corpus, min_tokens: int, what: str) -> str:
    joined = (
        f", {corpus.joined} of them made by joining consecutive paragraphs/documents of the same source"
        if corpus.joined
        else ""
    )
    first = (
        f"; the stream was read only until enough documents qualified, so the examples come from its first "
        f"{corpus.read} documents, not from a sample of the whole dataset"
        if corpus.stopped
        else ""
    )
    skipped = f"; skipped: {corpus.skips.describe()}" if corpus.skips else ""
    return (
        f"{len(corpus.docs)} {what} with at least {min_tokens} tokens{joined} "
        f"(of {corpus.read} documents read from {corpus.source_name}{first}{skipped})"
    )


def _repeats_words(repeats: int, what: str, distinct: bool) -> str:
    if not repeats:
        return ""
    return (
        f"; {repeats} candidate {what} repeated an earlier one's tokens exactly "
        f"({'redrawn' if distinct else 'kept, as asked'})"
    )


def _doc_picker(rng: np.random.Generator, n_docs: int, count: int):
    """Documents for successive examples: all different while there are enough documents
    (one example per document, as the paper did), else uniform with replacement."""
    order = iter(rng.permutation(n_docs).tolist()) if n_docs >= count else iter(())

    def pick() -> int:
        # once the permutation is used up (only after rare repeated examples), reuse documents
        d = next(order, None)
        return int(rng.integers(n_docs)) if d is None else d

    return pick


def _require_possible(possible: int, count: int, what: str, words: str) -> None:
    """Return nothing when ``possible`` examples (``what``, in words) are at least the ``count`` asked for.

    Raises:
        DataError: when they are fewer.
    """
    if possible < count:
        raise DataError(
            f"only {what} are possible from {words}; {count} were asked for (use more text or a smaller count)"
        )


@dataclass
class _Drawn:
    """The examples drawn so far, each new one checked against the earlier ones by ``finder``: their token ids,
    the document each was cut from and its start there."""

    finder: DuplicateFinder
    ids: list[list[int]] = field(default_factory=list)
    doc_index: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)

    def add(self, example: list[int], doc: int, start: int) -> bool:
        """Whether ``example`` was kept: it is, with its document and start, unless it repeats an earlier
        example's tokens and repeats are redrawn."""
        if not self.finder.add([sequence_key(example)])[0]:  # the same text elsewhere: not a new example
            return False
        self.ids.append(example)
        self.doc_index.append(doc)
        self.starts.append(start)
        return True

    def shortfall(self, what: str, words: str, count: int) -> DataError:
        """The error for too few examples drawn: only so many ``what`` from ``words`` for the ``count`` asked."""
        return DataError(f"could build only {len(self.ids)} {what} from {words}; {count} were asked for")

    def examples(
        self,
        description: str,
        what: str,
        distinct: bool,
        corpus: _Corpus,
        is_next: list[bool] | None = None,
        s1_lengths: list[int] | None = None,
    ) -> TextExamples:
        """The :class:`TextExamples` of what was drawn, the description told how many candidate ``what``
        repeated an earlier one."""
        repeats = self.finder.result().repeats
        description += _repeats_words(repeats, what, distinct)
        return TextExamples(
            self.ids,
            is_next,
            description,
            self.doc_index,
            self.starts,
            s1_lengths,
            repeats,
            corpus.skips.as_dict(),
            corpus.sha256,
        )


@dataclass
class _Windows:
    """GPT windows of ``n`` consecutive tokens cut from ``docs`` into ``drawn``, no two of one document
    overlapping (``taken``: the starts of each document's windows)."""

    docs: list[array]
    n: int
    drawn: _Drawn
    taken: dict[int, list[int]] = field(default_factory=dict)

    def draw(self, rng: np.random.Generator, count: int) -> str:
        """How the windows were drawn, once ``count`` are or every candidate was tried: one per document at a
        uniform random start while there are enough documents, then (too few documents, or repeated text)
        disjoint tiles."""
        how = ""
        if len(self.docs) >= count:
            for d in rng.permutation(len(self.docs)).tolist():
                if len(self.drawn.ids) == count:
                    break
                self._take(d, int(rng.integers(len(self.docs[d]) - self.n + 1)))
            how = "one per document, uniform random starts"
        if len(self.drawn.ids) < count:  # too few documents, or repeated text: disjoint tiles
            self._tiles(rng, count)
            how = (
                f"documents cut into consecutive {self.n}-token tiles from a random offset, tiles drawn uniformly "
                "without replacement"
            )
        return how

    def _tiles(self, rng: np.random.Generator, count: int) -> None:
        """Return nothing: cut every document into consecutive tiles from a random offset in
        ``[0, len mod n]`` and take tiles drawn uniformly without replacement until ``count`` windows are drawn."""
        n = self.n
        tiles: list[tuple[int, int]] = []
        for d, doc in enumerate(self.docs):
            length = len(doc)
            offset = int(rng.integers(length % n + 1))
            tiles.extend((d, offset + k * n) for k in range((length - offset) // n))
        for i in rng.permutation(len(tiles)).tolist():
            if len(self.drawn.ids) == count:
                break
            self._take(*tiles[i])

    def _take(self, d: int, start: int) -> None:
        """Return nothing: draw the window of document ``d`` at ``start`` unless it overlaps one already taken
        there or repeats one's text."""
        if any(abs(start - s) < self.n for s in self.taken.get(d, ())):
            return
        if self.drawn.add(self.docs[d][start : start + self.n].tolist(), d, start):
            self.taken.setdefault(d, []).append(start)


def _pair(rng: np.random.Generator, docs: list[array], a: int, n: int) -> tuple[int, bool, int, array, array]:
    """One candidate BERT pair with s1 cut from document ``a``: ``(len(s1), is_next, start of s1, s1, s2)``.

    len(s1) is uniform in [5, n - 7) and s2 has the other n - 2 - len(s1) tokens; with probability 0.5 s2
    continues s1 (``is_next``), else it is cut at a random place from another random document.
    """
    body = n - 2
    s1_len = int(rng.integers(5, n - 7))
    s2_len = body - s1_len
    nxt = bool(rng.random() < 0.5)
    doc_a = docs[a]
    if nxt:
        start = int(rng.integers(len(doc_a) - body + 1))
        s1 = doc_a[start : start + s1_len]
        s2 = doc_a[start + s1_len : start + body]
    else:
        start = int(rng.integers(len(doc_a) - s1_len + 1))
        s1 = doc_a[start : start + s1_len]
        b = int(rng.integers(len(docs) - 1))
        b += b >= a
        cut = int(rng.integers(len(docs[b]) - s2_len + 1))
        s2 = docs[b][cut : cut + s2_len]
    return s1_len, nxt, start, s1, s2


def gpt_window_examples(
    docs: Sequence[str] | TextSource,
    tokenizer: Any,
    n: int,
    count: int,
    seed: int = 0,
    distinct: bool = True,
    *,
    corpus_digest: bool = False,
) -> TextExamples:
    """The paper's GPT-2 inputs: ``count`` windows of ``n`` consecutive tokens, each from a
    document with at least 1.5 n tokens; no two windows overlap.

    With at least ``count`` qualifying documents, each window comes from a different document
    at a uniform random start (the paper's construction). With fewer, every document is cut into
    consecutive ``n``-token tiles from a random offset in ``[0, len mod n]`` and ``count`` tiles
    are drawn uniformly without replacement, so windows of one document are disjoint too.
    Documents of one source that are individually too short (paragraphs of a .txt file, modules
    of the built-in corpus) are joined with their consecutive neighbours until long enough; the
    description says how many were. A window with the same tokens as an earlier one is skipped
    (``distinct=False`` keeps it). With ``corpus_digest``, ``corpus_sha256`` is the SHA-256 of the documents
    drawn from (``_documents_sha256``). Returns :class:`TextExamples`.

    Raises:
        InputError: when ``n``, ``count`` or ``seed`` is not an integer, or ``n`` or ``count`` is below 1.
        DataError: when fewer than ``count`` disjoint windows of distinct content exist.
    """
    n, count, seed = _check_common(n, count, seed)
    if n < 1:
        raise InputError(f"n must be at least 1, got {n}")
    min_tokens = math.ceil(1.5 * n)
    corpus = _collect(docs, tokenizer, min_tokens, count, set(), corpus_digest)
    possible = sum(len(doc) // n for doc in corpus.docs)
    words = _corpus_words(corpus, min_tokens, "documents")
    _require_possible(possible, count, f"{possible} disjoint {n}-token windows", words)
    windows = _Windows(corpus.docs, n, _Drawn(DuplicateFinder(keep=not distinct)))
    how = windows.draw(data_rng(seed), count)
    if len(windows.drawn.ids) < count:
        raise windows.drawn.shortfall(f"distinct disjoint {n}-token windows", words, count)
    description = (
        f"{count} GPT-style windows of {n} consecutive tokens, no two overlapping ({how}; seed {seed}; "
        f"{possible} disjoint windows possible) from {words}"
    )
    return windows.drawn.examples(description, "windows", distinct, corpus)


def bert_pair_examples(
    docs: Sequence[str] | TextSource,
    tokenizer: Any,
    n: int,
    count: int,
    seed: int = 0,
    distinct: bool = True,
    *,
    corpus_digest: bool = False,
) -> TextExamples:
    """The paper's BERT inputs: ``[CLS] s1 [SEP] s2`` of exactly ``n`` token ids.

    For each example: len(s1) is uniform in
    [5, n - 7) (the paper's [5, n-2-5)); s2 has the remaining n - 2 - len(s1) tokens; with
    probability 0.5 s2 continues s1 in the same document (``is_next`` True), else it is cut at a
    random place from another random document (``is_next`` False). s1 and s2 come from documents
    with at least n - 2 tokens; shorter consecutive parts of one source are joined first. [CLS]
    and [SEP] ids come from ``tokenizer.cls_token_id`` / ``sep_token_id`` and are removed from
    the documents' own tokens, so each example holds exactly one [SEP], at ``len(s1) + 1``.
    A pair with the same tokens as an earlier one is redrawn (``distinct=False`` keeps it). With
    ``corpus_digest``, ``corpus_sha256`` is as in :func:`gpt_window_examples`. Returns :class:`TextExamples`.

    Raises:
        InputError: when ``n``, ``count`` or ``seed`` is not an integer, ``count`` is below 1, ``n`` is below 13,
            or the tokenizer has no [CLS] or [SEP] id.
        DataError: when fewer than 2 long enough documents exist, or too few distinct pairs can be built.
    """
    n, count, seed = _check_common(n, count, seed)
    if n < 13:
        raise InputError(f"BERT-style pairs need n of at least 13 (len(s1) is drawn from [5, n-7)), got {n}")
    cls_id = getattr(tokenizer, "cls_token_id", None)
    sep_id = getattr(tokenizer, "sep_token_id", None)
    if cls_id is None or sep_id is None:
        raise InputError("the tokenizer has no [CLS]/[SEP] token ids; BERT-style pairs need both")
    cls_id, sep_id = int(cls_id), int(sep_id)
    body = n - 2
    corpus = _collect(docs, tokenizer, body, count, {cls_id, sep_id}, corpus_digest)
    lengths = [len(d) for d in corpus.docs]
    words = _corpus_words(corpus, body, "documents")
    if len(lengths) < 2:
        raise DataError(f"BERT-style pairs need at least 2 documents with at least {body} tokens; found {words}")
    possible = sum(length - body + 1 for length in lengths)
    _require_possible(possible, count, f"about {possible} distinct {n}-token pairs", words)
    rng = data_rng(seed)
    pick = _doc_picker(rng, len(lengths), count)
    drawn = _Drawn(DuplicateFinder(keep=not distinct))
    is_next: list[bool] = []
    s1_lengths: list[int] = []
    attempts = 0
    max_attempts = 20 * count + 1000
    while len(drawn.ids) < count:
        attempts += 1
        a = pick()
        if attempts > max_attempts:
            raise drawn.shortfall(f"distinct {n}-token pairs", words, count)
        s1_len, nxt, start, s1, s2 = _pair(rng, corpus.docs, a, n)
        if drawn.add([cls_id, *s1, sep_id, *s2], a, start):
            is_next.append(nxt)
            s1_lengths.append(s1_len)
    k = sum(is_next)
    used = len(set(drawn.doc_index))  # s1's documents: distinct until the permutation is used up
    reuse = "one per document" if used == count else f"{used} documents for the {count} pairs' s1, some reused"
    description = (
        f"{count} BERT-style '[CLS] s1 [SEP] s2' pairs of exactly {n} tokens (seed {seed}; len(s1) uniform "
        f"in [5, {n - 7}); s2 continues s1 in the same document for {k}, cut from another random "
        f"document for {count - k}; {reuse}) from {words}"
    )
    return drawn.examples(description, "pairs", distinct, corpus, is_next, s1_lengths)
