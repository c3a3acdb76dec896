"""The audit facade: probe planning and the refusals that come before any data is read."""

from __future__ import annotations

import pytest

from mhaaudit import pipeline
from mhaaudit.auditing import audit, capture_features, plan_probes, probe_for_variant
from mhaaudit.errors import InputError, OfflineError

pytest.importorskip("transformers")


@pytest.fixture()
def no_data_pass(monkeypatch):
    """Fail the test if any example reaches a model: the refusal must come first."""

    def refuse(*a, **k):
        raise AssertionError("the data pass started before the input was refused")

    monkeypatch.setattr(pipeline, "stream", refuse)


def test_plan_probes_images_and_text():
    assert [p.variant for p in plan_probes("image")] == ["embedding", "random-attention", "random", "trained"]
    assert [(p.init, p.layer) for p in plan_probes("text")] == [
        ("random", 0),
        ("random", 1),
        ("trained", 0),
        ("trained", 1),
    ]
    assert [p.variant for p in plan_probes("image", ["random"], layers=[0, 2])] == ["random-L0", "random-L2"]
    # the command line's forms: a comma list of columns, depths and ranges as text
    assert [p.variant for p in plan_probes("image", "random,trained", layers="0,2")] == [
        "random-L0",
        "random-L2",
        "trained-L0",
        "trained-L2",
    ]
    assert [p.variant for p in plan_probes("image", "trained")] == ["trained"]
    assert [p.layer for p in plan_probes("text", ["trained"], layers="1-3")] == [1, 2, 3]
    with pytest.raises(InputError, match=r"^layers 'a,b'"):
        plan_probes("text", ["trained"], layers="a,b")
    assert probe_for_variant("trained-L3").layer == 3 and probe_for_variant("random-attention").random_attention
    with pytest.raises(InputError, match="unknown variant"):
        probe_for_variant("middle")


def test_missing_weights_path_is_refused_at_once(no_data_pass, vit_dir):
    with pytest.raises(InputError, match="no such file"):
        audit(str(vit_dir), weights="/nonexistent/weights", samples=10)


def test_limit_below_n_is_refused_before_the_data_pass(no_data_pass, vit_dir):
    with pytest.raises(InputError, match=r"^limit 5 is below n = 17.*raise limit"):
        audit(str(vit_dir), limit=5, samples=10)
    with pytest.raises(InputError, match="below n = 17"):
        capture_features(str(vit_dir), variant="random", limit=5)


def test_nothing_to_audit_is_not_success(no_data_pass):
    # vit-base's trained weights cannot be had offline (the tests run with HF_HUB_OFFLINE=1).
    with pytest.raises(OfflineError, match="no column could be audited"):
        audit("vit-base", variants=["trained"], samples=10)


def test_layer_that_would_do_nothing_is_refused():
    with pytest.raises(InputError, match=r"^layer has no effect with layers"):
        plan_probes("image", ["random"], layers=[0, 1], layer=2)
    with pytest.raises(InputError, match=r"^layer has no effect on a text model"):
        plan_probes("text", layer=2)
    with pytest.raises(InputError, match=r"^layer has no effect on the columns embedding"):
        plan_probes("image", ["embedding"], layer=2)
    assert [p.layer for p in plan_probes("image", ["embedding", "random"], layer=2)] == [0, 2]
    assert probe_for_variant("embedding").layer == 0


def test_save_features_writes_each_column_and_the_folder_is_checked_before_any_work(vit_dir, image_dir, tmp_path):
    """What check --save-features does, from the library: one folder per column, loadable without the
    model; a planted symbolic link or an input where a column's folder goes is refused first."""
    import torch

    from mhaaudit.auditing import check_features_folder
    from mhaaudit.errors import OutputError
    from mhaaudit.features import FeatureSet
    from mhaaudit.plot import plot_audit

    result = audit(
        str(vit_dir),
        variants=["embedding", "random"],
        data=str(image_dir),
        limit=40,
        samples=50,
        batch_size=16,
        sweep=True,
    )
    folder = check_features_folder(tmp_path / "feats", [str(vit_dir), str(image_dir)])
    assert result.save_features(folder) == folder
    assert sorted(p.name for p in folder.iterdir()) == ["embedding", "random"]
    again = FeatureSet.load(folder / "random")
    assert torch.equal(again.queries, result.column("random").features.queries)
    (tmp_path / "elsewhere").mkdir()
    (folder / "trained-L2").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputError, match="trained-L2 is a symbolic link"):
        check_features_folder(folder, [])
    (folder / "trained-L2").unlink()
    with pytest.raises(OutputError, match="lies where the features would be written"):
        check_features_folder(folder, [folder / "random" / "meta.json"])
    assert plot_audit(result, tmp_path / "sweeps.png") == tmp_path / "sweeps.png"
    assert (tmp_path / "sweeps.png").stat().st_size > 0


def _column_of(tokens):
    """An audited column (as ``check`` builds it) of the reduced ``tokens``, with the model's facts for the bound."""
    from types import SimpleNamespace

    from mhaaudit.auditing import check_features
    from mhaaudit.features import reduce_tokens

    tests, _sweep, _t = check_features(reduce_tokens(tokens, 0), samples=1000, progress=False)
    col = SimpleNamespace(status="ok", tests=tests, sweep=None)
    info = SimpleNamespace(num_heads=4, head_dim=16, n=tokens.shape[1], d=tokens.shape[2])
    return col, info


def test_the_bound_rests_on_a_proven_failure_of_assumption_1_not_on_a_holding_estimate():
    import torch

    from mhaaudit.auditing import memorisation_bound

    g = torch.Generator().manual_seed(0)
    E = torch.randn(400, 8, 16, generator=g)
    E[5, 0] = E[4, 0]  # two equal queries: every 8-subset holding both is dependent, about 1 draw in 250
    col, info = _column_of(E)
    a1 = col.tests["assumption_1"]
    assert (a1.verdict, a1.exact_status, a1.exact_basis) == ("holds", "fails", "witness")
    bound, hint = memorisation_bound(info, col)
    assert not bound.applies and bound.count is None
    assert "A1 fails" in bound.reason
    assert "sweep" in hint
    # without the equal pair the estimate holds and nothing is proven: the bound rests on the estimate
    col, info = _column_of(torch.randn(400, 8, 16, generator=g))
    assert col.tests["assumption_1"].exact_status == "undecided"
    bound, _ = memorisation_bound(info, col)
    assert bound.applies and bound.which == "theorem-1" and bound.count == 4 * (8 - 1) + 1


def test_the_tally_counts_a_check_by_its_proof_as_the_findings_do():
    """``summary_line()`` and a column's repr tally the checks as the report's findings group them: a check whose
    estimate holds while a witness proves it fails counts as failing, and the tally says so."""
    import torch

    from mhaaudit.display import verdict_tally

    g = torch.Generator().manual_seed(0)
    E = torch.randn(400, 8, 16, generator=g)
    E[5, 0] = E[4, 0]  # two equal queries: the estimate of Assumption 1 holds, a witness proves it fails
    col, _info = _column_of(E)
    records = [r.record() for r in col.tests.values()]
    by_estimate = sum(r["verdict"] == "holds" for r in records)
    proven = [r for r in records if r["verdict"] == "holds" and r.get("exact_status") == "fails"]
    assert "assumption_1" in [r["check"] for r in proven]
    fails = sum(r["verdict"] == "fails" for r in records) + len(proven)
    tally = verdict_tally(records)
    assert tally.startswith(
        f"{by_estimate - len(proven)} holds, {fails} fails ({len(proven)} proven against a holding estimate)"
    )
    # without the pair nothing is proven against an estimate, and the tally is the estimates'
    col, _info = _column_of(torch.randn(400, 8, 16, generator=g))
    records = [r.record() for r in col.tests.values()]
    assert "proven" not in verdict_tally(records)
    assert verdict_tally(records).startswith(f"{sum(r['verdict'] == 'holds' for r in records)} holds")


def test_the_bound_hints_at_a_sweep_only_where_remark_1_could_give_a_count():
    """Remark 1 needs Assumption 2 and n < d as Theorem 1 does: where either fails, a sweep gives no count, and the
    report does not send the user to run one."""
    import torch

    from mhaaudit.auditing import memorisation_bound

    g = torch.Generator().manual_seed(1)
    E = torch.randn(300, 8, 16, generator=g)
    E[:, 0] = E[0, 0]  # every query the same: Assumption 1 fails, proven
    col, info = _column_of(E)
    assert col.tests["assumption_1"].exact_status == "fails" and col.tests["assumption_2"].verdict == "holds"
    assert "sweep" in memorisation_bound(info, col)[1]
    E[:, 3] = E[:, 1]  # and every context matrix holds two equal rows: Assumption 2 fails too
    col, info = _column_of(E)
    assert col.tests["assumption_2"].verdict == "fails"
    bound, hint = memorisation_bound(info, col)
    assert not bound.applies and "A2 fails" in bound.reason and hint == ""
