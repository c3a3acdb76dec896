"""The paper's Table 1 verdicts for the offline columns, at the paper's sizes (slow).

ViT-Base/16 at 224 px (n = 197, d = 768), T = 2000 built-in images. The paper (ImageNet) found:
embedding layer: A1 fails (every [CLS] query is the same vector), A2 holds, GP fails, A3 holds;
random attention and random ViT: A1 holds, GP fails, A2 holds.
"""

import pytest

from mhaaudit.auditing import audit


@pytest.mark.slow
def test_table1_offline_columns():
    r = audit(
        "vit-base",
        variants=["embedding", "random-attention", "random"],
        limit=2000,
        samples=1000,
        batch_size=32,
        seed=0,
        stop_when_decided=True,
    )
    assert r.info.n == 197 and r.info.d == 768
    v = {c.probe.variant: {k: t.verdict for k, t in c.tests.items()} for c in r.columns}
    emb, ra, rnd = (r.column(x) for x in ("embedding", "random-attention", "random"))
    assert emb.features.T == 2000
    # embedding: identical queries -> A1 fails, proven without sampling
    assert v["embedding"]["assumption_1"] == "fails" and emb.tests["assumption_1"].proven
    assert emb.tests["assumption_1"].set_rank_ceiling == 1
    assert v["embedding"]["assumption_2"] == "holds"
    assert v["embedding"]["general_position"] == "fails"
    assert v["embedding"]["assumption_3"] == "holds"
    for name in ("random-attention", "random"):
        assert v[name]["assumption_1"] == "holds", (name, r.column(name).tests["assumption_1"].reason)
        assert v[name]["general_position"] == "fails"
        assert v[name]["assumption_2"] == "holds"
    # the trained column is not part of this offline run
    assert [c.probe.variant for c in r.columns] == ["embedding", "random-attention", "random"]
    assert ra.tests["assumption_1"].fraction >= 0.99 and rnd.tests["assumption_1"].fraction >= 0.99
