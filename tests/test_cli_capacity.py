"""``mhaaudit capacity``: Z against brute force, Proposition 2, the certificate, and the command.

Z is checked against the attention probabilities the models themselves compute
(``output_attentions``), the Gram-based certificate against ``memorization_certificate`` and
``torch.linalg.matrix_rank``, and the command end to end on a tiny random ViT in every format.
"""

from __future__ import annotations

import copy
import json
import math
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import save_tiny_vit, tmp_leftovers

from clitools import assert_one_error, auto_device, help_text, run
from mhaaudit import __version__
from mhaaudit.capacity import attention_combinations, memorization_certificate, random_attention_weights
from mhaaudit.capacity_audit import ZBuilder, capacity_audit, certify_head_prefixes, parse_heads
from mhaaudit.cli.app import main
from mhaaudit.cli.capacity import LAYER_DEPRECATED
from mhaaudit.errors import InputError
from mhaaudit.io import read_parquet_metadata

transformers = pytest.importorskip("transformers")

N, D, H = 17, 32, 4  # tiny ViT: 1 + (32 / 8)^2 tokens, width 32, 4 heads of d_h = 8
FAST = ["--limit", "40", "--samples", "100", "--batch-size", "16"]
RECORD_FIELDS = {"model", "variant", "heads", "rank", "bound", "bound_kind", "shared_context", "residual", "T", "n", "d",
                 "d_h", "H", "tolerance", "seed"}


@pytest.fixture(scope="module")
def vit4(tmp_path_factory):
    """Tiny ViT with 4 heads of d_h = 8 (n = 17, d = 32)."""
    return save_tiny_vit(tmp_path_factory.mktemp("tiny_vit4"), num_attention_heads=4)




def json_run(capsys, *args):
    rc, out, err = run(capsys, "capacity", *args, "--format", "json")
    assert rc == 0, err
    return json.loads(out)


# --------------------------------------------------------------------------------------------
# --heads parsing
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec,want", [("1-12", list(range(1, 13))), ("3", [3]), ("1,2,4", [1, 2, 4]),
                                       ("4,1-2", [1, 2, 4]), (" 2 , 2 ", [2]), ([3, 1], [1, 3]), (5, [5])])
def test_parse_heads(spec, want):
    assert parse_heads(spec, 12) == want


def test_parse_heads_none_means_all():
    assert parse_heads(None, 12) is None


@pytest.mark.parametrize("spec,match", [("", "names no head"), (" , ", "names no head"), ("0", "start at 1"),
                                        ("0-3", "start at 1"), ("-2", "head counts"), ("5-3", "empty"),
                                        ("a", "head counts"), ("13", "at most 12"), ("1-13", "at most 12"),
                                        (True, "head counts")])
def test_parse_heads_errors(spec, match):
    with pytest.raises(InputError, match=match):
        parse_heads(spec, 12)


# --------------------------------------------------------------------------------------------
# Z against brute force
# --------------------------------------------------------------------------------------------


def _brute_z(E, x, Wq, Wk, bq, bk, pre, scale):
    """Row by row, head by head, with explicit softmax: z_h = E_t^T softmax(scale * K q)."""
    T = x.shape[0]
    Hh = Wq.shape[0]
    rows = []
    for t in range(T):
        parts = []
        for h in range(Hh):
            q = pre(x[t]) @ Wq[h] + (bq[h] if bq is not None else 0)
            K = pre(E[t]) @ Wk[h] + (bk[h] if bk is not None else 0)
            a = scale * (K @ q)
            p = torch.exp(a - a.max())
            p = p / p.sum()
            parts.append(E[t].T @ p)
        rows.append(torch.cat(parts))
    return torch.stack(rows)


@pytest.mark.parametrize("scale", [None, 0.07])
def test_zbuilder_matches_brute_force(scale):
    g = torch.Generator().manual_seed(0)
    T, n, d, Hh, dh = 7, 5, 6, 3, 2
    E = torch.randn(T, n, d, generator=g, dtype=torch.float64)
    Wq = torch.randn(Hh, d, dh, generator=g, dtype=torch.float64)
    Wk = torch.randn(Hh, d, dh, generator=g, dtype=torch.float64)
    bq = torch.randn(Hh, dh, generator=g, dtype=torch.float64)
    bk = torch.randn(Hh, dh, generator=g, dtype=torch.float64)
    ln = torch.nn.LayerNorm(d)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.3, 0.3)
    zb = ZBuilder(Wq=Wq, Wk=Wk, bq=bq, bk=bk, pre=ln, scale=scale, query_index=0)
    for part in E.float().split(3):  # streamed in batches of float32 tokens, like the model's output
        zb.update(part)
    Z = zb.result()
    ln64 = copy.deepcopy(ln).double()
    with torch.no_grad():
        want = _brute_z(E.float().double(), E.float().double()[:, 0], Wq, Wk, bq, bk, ln64,
                        scale if scale is not None else 1 / math.sqrt(dh))
    assert Z.shape == (T, Hh * d) and Z.dtype == torch.float64
    torch.testing.assert_close(Z, want, rtol=1e-10, atol=1e-12)
    assert ln.weight.dtype == torch.float32  # the model's module is not converted


def test_shared_context_uses_example_zero():
    g = torch.Generator().manual_seed(1)
    T, n, d = 6, 4, 5
    E = torch.randn(T, n, d, generator=g, dtype=torch.float64)
    Wq, Wk = random_attention_weights(d, 2, 3, seed=2)
    zb = ZBuilder(Wq=Wq, Wk=Wk, query_index=1, shared_context=True)
    zb.update(E[:2])
    zb.update(E[2:])  # later batches still use the context of the very first example
    shared = E[0:1].expand(T, n, d)
    want = _brute_z(shared, E[:, 1], Wq, Wk, None, None, lambda v: v, 1 / math.sqrt(3))
    torch.testing.assert_close(zb.result(), want, rtol=1e-10, atol=1e-12)


def _hf_probs(model, inputs):
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    return out.attentions[0].double()  # (B, H, n, n) of block 1


def test_z_uses_the_models_own_attention_vit(vit4):
    """Row t of Z equals E_t^T (block 1's attention of the [CLS] query), head by head."""
    from mhaaudit.capacity_audit import _attention_for
    from mhaaudit.models import load_model

    pm = load_model(str(vit4), weights="trained", max_layer=1, device="cpu")
    g = torch.Generator().manual_seed(0)
    px = torch.randn(5, 3, 32, 32, generator=g)
    tokens = pm.capture({"pixel_values": px}, [0])[0]
    Wq, Wk, bq, bk, pre, scale, causal, _ = _attention_for(pm, 1, "model", 0)
    assert not causal
    zb = ZBuilder(Wq=Wq, Wk=Wk, bq=bq, bk=bk, pre=pre, scale=scale, query_index=pm.info.query_index)
    zb.update(tokens)
    model = transformers.ViTModel.from_pretrained(str(vit4), attn_implementation="eager").eval()
    P = _hf_probs(model, {"pixel_values": px})[:, :, 0, :]  # (B, H, n): the [CLS] query's row
    want = torch.einsum("bhn,bnd->bhd", P, tokens.double()).reshape(5, -1)
    torch.testing.assert_close(zb.result(), want, rtol=1e-5, atol=1e-6)


def test_z_decoder_last_query_sees_every_token(tmp_path):
    """GPT-2: the causal mask leaves the last token's attention row over all n tokens."""
    from mhaaudit.capacity_audit import _attention_for
    from mhaaudit.models import load_model

    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64)
    torch.manual_seed(0)
    transformers.GPT2Model(cfg).eval().save_pretrained(str(tmp_path))
    pm = load_model(str(tmp_path), weights="trained", max_layer=1, device="cpu", context_length=12)
    ids = torch.randint(0, 100, (4, 12), generator=torch.Generator().manual_seed(1))
    tokens = pm.capture({"input_ids": ids}, [0])[0]
    Wq, Wk, bq, bk, pre, scale, causal, _ = _attention_for(pm, 1, "model", 0)
    assert causal and pm.info.query_index == 11
    zb = ZBuilder(Wq=Wq, Wk=Wk, bq=bq, bk=bk, pre=pre, scale=scale, query_index=pm.info.query_index, causal=causal)
    zb.update(tokens)
    model = transformers.GPT2Model.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    P = _hf_probs(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    assert torch.all(P[:, :, 11, :] > 0)  # the last query attends to all tokens
    want = torch.einsum("bhn,bnd->bhd", P[:, :, 11, :], tokens.double()).reshape(4, -1)
    torch.testing.assert_close(zb.result(), want, rtol=1e-5, atol=1e-6)
    # An earlier query position: the context is cut after the query row, as the mask does.
    zb2 = ZBuilder(Wq=Wq, Wk=Wk, bq=bq, bk=bk, pre=pre, scale=scale, query_index=5, causal=True)
    zb2.update(tokens)
    want2 = torch.einsum("bhn,bnd->bhd", P[:, :, 5, :6], tokens[:, :6].double()).reshape(4, -1)
    torch.testing.assert_close(zb2.result(), want2, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------
# Proposition 2 and the certificate
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("Hh,n,seed", [(1, 3, 0), (2, 4, 1), (3, 5, 2), (4, 3, 3)])
def test_proposition_2_shared_context_rank(Hh, n, seed):
    """With one shared context, rank(Z) <= H (n - 1) + 1, and generic weights reach it."""
    d, dh = 12, 4
    g = torch.Generator().manual_seed(seed)
    T = 3 * (Hh * (n - 1) + 1)
    E = torch.randn(n, d, generator=g, dtype=torch.float64)
    x = torch.randn(T, d, generator=g, dtype=torch.float64) * 2
    Wq, Wk = random_attention_weights(d, Hh, dh, seed)
    Z = attention_combinations(E, x, Wq * 3, Wk * 3)
    bound = Hh * (n - 1) + 1
    exact = int(torch.linalg.matrix_rank(Z))
    certs = certify_head_prefixes(Z, d, range(1, Hh + 1))
    for c in certs:
        assert c.rank <= c.heads * (n - 1) + 1
    assert certs[-1].rank == exact == bound  # tight, as the paper says
    assert certs[-1].residual < 1e-6


def test_certificate_ranks_match_matrix_rank_and_memorization_certificate():
    g = torch.Generator().manual_seed(4)
    T, d, Hh = 30, 6, 5
    # Low-rank pieces so that several head prefixes are rank deficient below T.
    Z = torch.randn(T, 4, generator=g, dtype=torch.float64) @ torch.randn(4, Hh * d, generator=g, dtype=torch.float64)
    Z[:, 2 * d:] += torch.randn(T, (Hh - 2) * d, generator=g, dtype=torch.float64)
    certs = certify_head_prefixes(Z, d, [1, 2, 3, 5], seed=7)
    for c in certs:
        Zh = Z[:, : c.heads * d]
        assert c.rank == int(torch.linalg.matrix_rank(Zh)) == memorization_certificate(Zh).rank
        assert c.rank_cap == min(T, c.heads * d)
        assert len(c.rows) == c.rank
        assert int(torch.linalg.matrix_rank(Zh[list(c.rows)])) == c.rank  # the chosen rows are independent
        assert c.residual < 1e-8
    assert [c.rank for c in certs] == [4, 4, 10, 22]


def test_certificate_residual_is_the_real_fit():
    """Solving the value/output weights for the chosen rows hits the random labels."""
    g = torch.Generator().manual_seed(5)
    Z = torch.randn(12, 3 * 8, generator=g, dtype=torch.float64)
    (c,) = certify_head_prefixes(Z, 8, [3], seed=11)
    assert c.rank == 12 and c.rows == tuple(range(12)) and c.method.endswith("weights: gram solve")
    assert c.residual < 1e-12
    # Two nearly equal rows: the Gram route squares the condition number and fails, the QR route fits.
    Z2 = torch.randn(10, 40, generator=g, dtype=torch.float64)
    Z2[9] = Z2[8] + 1e-9 * torch.randn(40, generator=g, dtype=torch.float64)
    (c2,) = certify_head_prefixes(Z2, 8, [5], seed=1)
    assert c2.rank == 10 == int(torch.linalg.matrix_rank(Z2))
    assert c2.method.endswith("weights: qr solve") and c2.residual < 1e-5


def test_full_row_rank_is_inherited_by_more_heads():
    g = torch.Generator().manual_seed(6)
    Z = torch.randn(10, 5 * 8, generator=g, dtype=torch.float64)
    certs = certify_head_prefixes(Z, 8, range(1, 6))
    assert [c.rank for c in certs] == [int(torch.linalg.matrix_rank(Z[:, : h * 8])) for h in range(1, 6)] == [8, 10, 10, 10, 10]
    assert "QR" in certs[1].method or "singular values" in certs[1].method
    assert all("inherited" in c.method for c in certs[2:])
    assert all(c.residual < 1e-10 for c in certs)
    zero = certify_head_prefixes(torch.zeros(5, 8, dtype=torch.float64), 4, [1, 2])
    assert [x.rank for x in zero] == [0, 0] and zero[0].residual == 0.0


def test_certify_rejects_bad_input():
    with pytest.raises(InputError, match="not T x"):
        certify_head_prefixes(torch.zeros(3, 10), 4, [1])
    with pytest.raises(InputError, match="at most 2"):
        certify_head_prefixes(torch.zeros(3, 8), 4, [3])
    with pytest.raises(InputError, match="NaN"):
        certify_head_prefixes(torch.full((3, 8), float("nan")), 4, [1])


# --------------------------------------------------------------------------------------------
# The library call
# --------------------------------------------------------------------------------------------


def test_capacity_audit_library(vit4, image_dir):
    r = capacity_audit(str(vit4), heads="1-4", data=str(image_dir), limit=40, samples=100, batch_size=16,
                       variants=["random"])
    (col,) = r.columns
    assert col.status == "ok" and col.T == 40
    assert [c.heads for c in col.certificates] == [1, 2, 3, 4]
    ranks = [c.rank for c in col.certificates]
    assert ranks == sorted(ranks) and ranks[0] <= D and ranks[-1] <= 40
    # The [CLS] token of the embedding output is the same vector for every image: A1 fails for sure.
    a = col.assumptions
    assert a.a1 == "fails" and a.a2 == "holds" and a.kruskal_estimate == 1
    b = col.bounds[4]
    assert b.which == "remark-1" and b.count == 4 * (1 - 1) + 1 and b.reconstructed
    recs = r.records()
    assert len(recs) == 4 and RECORD_FIELDS <= set(recs[0])
    assert all(rec["residual"] < 1e-6 for rec in recs)


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def test_table_format(capsys, vit4, image_dir):
    rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FAST)
    assert rc == 0, err
    assert "rank(Z)" in out and "reconstructed from the paper's proof" in out
    assert "random" in out and "trained" in out
    assert "The certificate" in out and "residual" in out
    assert "Remark 1" in out or "remark-1" in out


def test_json_document(capsys, vit4, image_dir):
    doc = json_run(capsys, vit4, "--data", image_dir, *FAST, "--seed", "3")
    meta, recs = doc["meta"], doc["records"]
    assert meta["command"] == "capacity" and meta["version"] == __version__ and meta["seed"] == 3
    assert meta["device"] == auto_device()
    assert meta["heads"] == [H] and meta["head_dim"] == 8
    assert {r["variant"] for r in recs} == {"random", "trained"}
    for r in recs:
        assert RECORD_FIELDS <= set(r)
        assert r["heads"] == H and r["H"] == H and r["n"] == N and r["d"] == D and r["d_h"] == 8 and r["T"] == 40
        assert r["rank"] <= min(40, H * D) and r["residual"] < 1e-6 and r["seed"] == 3
        assert r["shared_context"] is False and r["prop2_verdict"] is None
        assert r["bound_kind"] in ("theorem-1", "remark-1", "not-applicable")
    assert meta["columns"]["random"]["assumptions"]["assumption_2"] == "holds"


def test_heads_sweep_and_plot(capsys, vit4, image_dir, tmp_path):
    plot = tmp_path / "cap.png"
    out = tmp_path / "cap.parquet"
    doc = json_run(capsys, vit4, "--data", image_dir, *FAST, "--heads", "1-4", "--variants", "random",
                   "--plot", plot, "--out", out)
    ranks = [r["rank"] for r in doc["records"]]
    assert [r["heads"] for r in doc["records"]] == [1, 2, 3, 4]
    assert ranks == sorted(ranks) and ranks[0] == min(40, D)
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:4] == b"\x89PNG"
    t = pq.read_table(out)
    assert t.column("rank").to_pylist() == ranks
    assert read_parquet_metadata(out)["command"] == "capacity"
    assert tmp_leftovers(tmp_path) == []


def test_shared_context(capsys, vit4, image_dir):
    doc = json_run(capsys, vit4, "--data", image_dir, "--limit", "60", "--samples", "100", "--heads", "1,2",
                   "--variants", "random", "--shared-context")
    for r in doc["records"]:
        assert r["shared_context"] is True
        assert r["prop2_bound"] == r["heads"] * (N - 1) + 1
        assert r["rank"] <= r["prop2_bound"] and r["prop2_verdict"] == "holds"
    # With one head, the ceiling (17) is far below T = 60 and the width 32: the check has teeth.
    assert doc["records"][0]["rank"] <= N


def test_random_attention(capsys, vit4, image_dir):
    a = json_run(capsys, vit4, "--data", image_dir, *FAST, "--variants", "random", "--attention", "random")
    b = json_run(capsys, vit4, "--data", image_dir, *FAST, "--variants", "random", "--attention", "random")
    assert a["records"] == b["records"]  # seeded
    assert a["meta"]["attention"] == "random"
    assert any("random heads" in n for n in a["meta"]["notes"])
    assert a["records"][0]["rank"] <= 40


def test_parquet_to_stdout(capsysbinary, vit4, image_dir, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    rc = main(["capacity", str(vit4), "--data", str(image_dir), *FAST, "--variants", "random", "--format", "parquet"])
    out, err = capsysbinary.readouterr()
    assert rc == 0, err
    t = pq.read_table(pa.BufferReader(out))
    rows = t.to_pylist()
    assert len(rows) == 1 and rows[0]["variant"] == "random" and rows[0]["heads"] == H
    assert json.loads(t.schema.metadata[b"mhaaudit"])["command"] == "capacity"


def test_from_check_results(capsys, vit4, image_dir, tmp_path):
    res = tmp_path / "results.parquet"
    rc, _, err = run(capsys, "check", vit4, "--data", image_dir, "--limit", "40", "--samples", "100",
                     "--variants", "embedding", "--variants", "random", "--sweep", "--out", res)
    assert rc == 0, err
    doc = json_run(capsys, vit4, "--data", image_dir, *FAST, "--from", res, "--variants", "random,trained")
    rec = {r["variant"]: r for r in doc["records"]}
    # The 'embedding' column of check is the random weights' layer 0: the input of block 1.
    col = doc["meta"]["columns"]["random"]["assumptions"]
    assert "embedding" in col["source"] and col["assumption_1"] == "fails" and col["assumption_2"] == "holds"
    assert rec["random"]["bound_kind"] == "remark-1" and rec["random"]["kruskal_estimate"] == 1
    # check audited no trained column at layer 0: no bound, but the certificate is still computed.
    assert rec["trained"]["bound_kind"] == "not-applicable" and rec["trained"]["bound"] is None
    assert rec["trained"]["rank"] >= 1
    # --layer 2: the input of block 2 is check's 'random' column (output of block 1).
    doc2 = json_run(capsys, vit4, "--data", image_dir, *FAST, "--from", res, "--variants", "random", "--layer", "2")
    assert "(column random)" in doc2["meta"]["columns"]["random"]["assumptions"]["source"]
    # --block 2 names the same block: the same records.
    doc3 = json_run(capsys, vit4, "--data", image_dir, *FAST, "--from", res, "--variants", "random", "--block", "2")
    assert doc3["records"] == doc2["records"] and doc3["meta"]["layer"] == 2


def test_trained_unavailable_offline(capsys, image_dir):
    doc = json_run(capsys, "vit-base", "--data", image_dir, "--limit", "8", "--samples", "20", "--heads", "1",
                   "--variants", "trained,random", "--attention", "random")
    rec = {r["variant"]: r for r in doc["records"]}
    assert rec["trained"]["status"] == "unavailable" and rec["trained"]["rank"] is None
    assert "offline" in rec["trained"]["reason"].lower() or "hub" in rec["trained"]["reason"].lower()
    assert rec["random"]["status"] == "ok" and rec["random"]["n"] == 197 and rec["random"]["T"] == 8


# --------------------------------------------------------------------------------------------
# Bad input: one line on stderr, exit 2, nothing written
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args,match", [
    (["--heads", "5"], "at most 4"),
    (["--heads", "1-9"], "at most 4"),
    (["--heads", "0"], "start at 1"),
    (["--heads", ""], "names no head"),
    (["--heads", "x"], "--heads"),
    (["--limit", "0"], "--limit"),
    (["--batch-size", "0"], "--batch-size"),
    (["--samples", "0"], "--samples"),
    (["--layer", "0"], "--layer"),
    (["--block", "0"], "--block"),
    (["--block", "3"], "block"),
    (["--block", "2", "--layer", "2"], "--block only"),
    (["--threshold", "0"], "--threshold"),
    (["--variants", "embedding"], "unknown variant"),
    (["--attention", "other"], "--attention"),
    (["--from", "missing.parquet"], "no such file"),
    (["--rtol", "-1"], "rtol"),
])
def test_bad_input(capsys, vit4, image_dir, tmp_path, args, match):
    out = tmp_path / "o.parquet"
    plot = tmp_path / "p.png"
    rc, stdout, err = run(capsys, "capacity", vit4, "--data", image_dir, "--limit", "20", "--samples", "20",
                          "--out", out, "--plot", plot, *args)
    assert_one_error(rc, err, match)
    assert stdout == ""
    assert not out.exists() and not plot.exists() and tmp_leftovers(tmp_path) == []


def test_layer_is_a_deprecated_alias_of_block(capsys, vit4, image_dir):
    """--layer K still works, means --block K, and says so in one warning line on stderr."""
    rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FAST, "--variants", "random", "--layer", "2",
                       "--format", "json")
    assert rc == 0, err
    assert err.splitlines() == [LAYER_DEPRECATED]
    assert err.startswith("Warning: --layer is deprecated for capacity; use --block (same meaning: ")
    via_block = json_run(capsys, vit4, "--data", image_dir, *FAST, "--variants", "random", "--block", "2")
    assert json.loads(out)["records"] == via_block["records"]
    assert via_block["meta"]["layer"] == 2 and "input of block 2" in via_block["meta"]["tokens"]
    # a block past the model's depth: the warning, then the one error line
    rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FAST, "--layer", "3")
    warning, error = err.strip().splitlines()
    assert warning == LAYER_DEPRECATED
    assert_one_error(rc, error, "2 blocks")
    assert out == ""


def test_help_says_what_block_reads(capsys):
    text = help_text(capsys, "capacity")
    assert "--block" in text and "--layer" in text and "table|json|parquet" in text
    assert "the output of block K-1" in text and "Deprecated alias of --block" in text


def test_from_a_file_that_is_not_check_results(capsys, vit4, image_dir, tmp_path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), bad)
    rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FAST, "--from", bad)
    assert_one_error(rc, err, "not a results file")


def test_bad_output_paths(capsys, vit4, image_dir, tmp_path):
    rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FAST, "--plot", tmp_path / "p.txt")
    assert_one_error(rc, err, ".png")
    rc, out, err = run(capsys, "capacity", vit4, "--data", image_dir, *FAST, "--out", tmp_path / "missing" / "o.parquet")
    assert_one_error(rc, err, "does not exist")


def test_from_results_of_another_model_is_refused(capsys, vit4, vit_dir_wide, image_dir, tmp_path):
    res = tmp_path / "results.parquet"
    rc, _, err = run(capsys, "check", vit4, "--data", image_dir, "--limit", "20", "--samples", "20",
                     "--variants", "embedding", "--out", res)
    assert rc == 0, err
    rc, out, err = run(capsys, "capacity", vit_dir_wide, "--data", image_dir, *FAST, "--from", res)
    assert_one_error(rc, err, "d = 32")
    assert out == ""


def test_text_decoder_end_to_end(capsys, tmp_path):
    """A tiny GPT-2 on the built-in text: the last token is the query; the causal mask is noted."""
    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64)
    torch.manual_seed(0)
    transformers.GPT2Model(cfg).eval().save_pretrained(str(tmp_path / "gpt2"))
    doc = json_run(capsys, tmp_path / "gpt2", "--context-length", "8", "--limit", "30", "--samples", "50",
                   "--variants", "random", "--heads", "1,4")
    recs = doc["records"]
    assert [r["heads"] for r in recs] == [1, 4] and all(r["n"] == 8 and r["d"] == 32 for r in recs)
    assert all(r["rank"] <= min(r["T"], r["heads"] * 32) and r["residual"] < 1e-6 for r in recs)
    assert any("causal mask" in n and "changes nothing" in n for n in doc["meta"]["notes"])


def test_z_uses_the_models_own_attention_bert(tmp_path):
    """BERT (post-LN): the keys/queries read the block input directly; Z matches its attention."""
    from mhaaudit.capacity_audit import _attention_for
    from mhaaudit.models import load_model

    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                  vocab_size=100, max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.BertModel(cfg).eval().save_pretrained(str(tmp_path))
    pm = load_model(str(tmp_path), weights="trained", max_layer=1, device="cpu", context_length=10)
    ids = torch.randint(0, 100, (3, 10), generator=torch.Generator().manual_seed(2))
    tokens = pm.capture({"input_ids": ids}, [0])[0]
    Wq, Wk, bq, bk, pre, scale, causal, _ = _attention_for(pm, 1, "model", 0)
    zb = ZBuilder(Wq=Wq, Wk=Wk, bq=bq, bk=bk, pre=pre, scale=scale, query_index=0, causal=causal)
    zb.update(tokens)
    model = transformers.BertModel.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    P = _hf_probs(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})[:, :, 0, :]
    want = torch.einsum("bhn,bnd->bhd", P, tokens.double()).reshape(3, -1)
    torch.testing.assert_close(zb.result(), want, rtol=1e-5, atol=1e-6)


def test_z_matches_attention_weights_probs_timm(timm_dir):
    """timm ViT (fused qkv): Z equals E^T of the probabilities AttentionWeights computes."""
    from mhaaudit.capacity_audit import _attention_for
    from mhaaudit.models import first_attention, load_model

    pm = load_model(str(timm_dir), weights="trained", max_layer=1, device="cpu")
    assert pm.info.backend == "timm"
    px = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    tokens = pm.capture({"pixel_values": px}, [0])[0]
    Wq, Wk, bq, bk, pre, scale, causal, _ = _attention_for(pm, 1, "model", 0)
    zb = ZBuilder(Wq=Wq, Wk=Wk, bq=bq, bk=bk, pre=pre, scale=scale, query_index=0, causal=causal)
    zb.update(tokens)
    P = first_attention(pm, 1).probs(tokens).double()[:, :, 0, :]
    want = torch.einsum("bhn,bnd->bhd", P, tokens.double()).reshape(4, -1)
    torch.testing.assert_close(zb.result(), want, rtol=1e-5, atol=1e-6)
