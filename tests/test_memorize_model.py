"""Tests for mhaaudit.memorize.model: the one-layer attention model of the experiments."""

from __future__ import annotations

import torch

from mhaaudit.memorize.model import MemorizeModel


def test_model_attends_over_context_only():
    g = torch.Generator().manual_seed(0)
    m = MemorizeModel(d=64, n=5, heads=3, head_dim=7, out_dim=10, generator=g)
    x = torch.rand(6, 64)
    shared = torch.rand(5, 64)
    out, p = m(x, shared, return_attention=True)
    assert out.shape == (6, 10) and p.shape == (6, 3, 5)
    torch.testing.assert_close(p.sum(-1), torch.ones(6, 3))
    # The per-example path agrees with the shared path on the same contexts.
    out2, p2 = m(x, shared.expand(6, 5, 64), return_attention=True)
    torch.testing.assert_close(out, out2)
    torch.testing.assert_close(p, p2)
    # d_v = 1 per head: W_V is (H, d), W_O maps H -> d; no biases anywhere.
    assert m.wv.shape == (3, 64) and m.wo.shape == (64, 3)
    assert all("bias" not in name for name, _ in m.named_parameters())


def test_one_head_predicts_at_most_three_classes_so_its_ceiling_holds_for_any_weights():
    """Brute force: one-head models of many random weights, with scores of either sign, predict only the
    classes ``one_head_ceiling`` allows, and never memorise more of a labelling than it says."""
    from mhaaudit.memorize.model import one_head_ceiling

    g = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 10, (300,), generator=g)
    ceiling = one_head_ceiling(labels)
    counts = torch.bincount(labels, minlength=10)
    assert ceiling == int(counts[0]) + int(counts[1:].sort(descending=True).values[:2].sum())
    for _ in range(50):
        m = MemorizeModel(d=64, n=4, heads=1, head_dim=8, out_dim=10, generator=g)
        with torch.no_grad():
            m.wv.mul_(torch.randn(1, generator=g) * 50)  # scores large and of either sign
            pred = m(torch.rand(300, 64, generator=g), torch.rand(4, 64, generator=g)).argmax(-1)
        u = (m.readout @ m.wo)[:, 0]
        assert set(pred.tolist()) <= {int(u.argmax()), int(u.argmin()), 0}
        # the best any assignment of the three classes does on these labels
        assert int((pred == labels).sum()) <= ceiling


def test_the_ceiling_is_of_the_labels_the_point_trains_on(monkeypatch):
    """``point_generator`` and ``make_dataset`` give the labels training draws for a point (what figure2 reads)."""
    from mhaaudit.memorize import training
    from mhaaudit.memorize.data import make_dataset, point_generator
    from mhaaudit.memorize.training import Point, Recipe, train_memorize

    seen = []

    def spy(**kw):
        out = make_dataset(**kw)
        seen.append(out[2].clone())
        return out

    monkeypatch.setattr(training, "make_dataset", spy)
    recipe = Recipe(max_steps=2)
    train_memorize(Point(heads=1, n=4, head_dim=8, size=50, seed=7), recipe)
    again = make_dataset(
        size=50, n=4, task="classification", context="shared", classes=100, generator=point_generator(7)
    )
    assert len(seen) == 1 and torch.equal(seen[0], again[2])
