"""The capacity facade, as the library calls it."""

from __future__ import annotations

import pytest

from mhaaudit.capacity import capacity_audit

D = 32  # the tiny ViT's width
RECORD_FIELDS = {
    "model",
    "variant",
    "heads",
    "rank",
    "bound",
    "bound_kind",
    "shared_context",
    "residual",
    "T",
    "n",
    "d",
    "d_h",
    "H",
    "tolerance",
    "seed",
}

transformers = pytest.importorskip("transformers")


# --------------------------------------------------------------------------------------------
# The library call
# --------------------------------------------------------------------------------------------


def test_capacity_audit_library(vit4, image_dir):
    r = capacity_audit(
        str(vit4), heads="1-4", data=str(image_dir), limit=40, samples=100, batch_size=16, variants=["random"], block=1
    )
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


def test_from_results_of_other_examples_is_refused(vit4, image_dir, tmp_path):
    from mhaaudit.cli.app import main
    from mhaaudit.errors import InputError

    res = tmp_path / "check.parquet"
    assert (
        main(
            [
                "check",
                str(vit4),
                "--data",
                str(image_dir),
                "--limit",
                "40",
                "--samples",
                "50",
                "--batch-size",
                "16",
                "--variants",
                "random",
                "--layer",
                "1",
                "--out",
                str(res),
                "--format",
                "json",
            ]
        )
        == 0
    )
    with pytest.raises(InputError, match="limit 40 examples, this run limit 30"):
        capacity_audit(str(vit4), from_path=res, data=str(image_dir), limit=30, variants=["random"], block=2)
    other = tmp_path / "other"
    other.mkdir()
    for p in sorted(image_dir.iterdir())[20:]:
        (other / p.name).write_bytes(p.read_bytes())
    with pytest.raises(InputError, match="other data"):
        capacity_audit(str(vit4), from_path=res, data=str(other), limit=40, variants=["random"], block=2)
    with pytest.raises(InputError, match="no effect with from_path"):  # nothing is sampled: samples would be ignored
        capacity_audit(
            str(vit4), from_path=res, data=str(image_dir), limit=40, samples=50, variants=["random"], block=2
        )
    r = capacity_audit(str(vit4), from_path=res, data=str(image_dir), limit=40, variants=["random"], block=2)
    assert r.columns[0].T == 40 and r.columns[0].assumptions.source.startswith("read from")


WIDER = r"do not fit .*embeddings\.cls_token has shape \(1, 1, 48\)"


def test_a_weights_file_of_another_width_is_refused_before_the_first_column(
    vit_dir, vit_dir_wide, image_dir, monkeypatch
):
    """capacity reads the shapes of a single weights file before it loads any column (the random one first), as
    check does before its first: a file of another width costs no audit."""
    from mhaaudit import auditing, pipeline
    from mhaaudit.errors import ModelError

    def no_load(*args, **kwargs):
        raise AssertionError("a column was loaded before the weights file was checked")

    monkeypatch.setattr(pipeline, "load", no_load)
    monkeypatch.setattr(auditing, "collect_features", no_load)
    wide = str(vit_dir_wide / "model.safetensors")
    with pytest.raises(ModelError, match=WIDER):
        capacity_audit(str(vit_dir), data=str(image_dir), limit=8, weights=wide, block=1)
    with pytest.raises(ModelError, match=WIDER):
        auditing.audit(str(vit_dir), data=str(image_dir), limit=8, weights=wide)
