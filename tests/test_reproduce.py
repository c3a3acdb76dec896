"""The paper's published values (the package data) and how a run's records are held against them."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest

from mhaaudit.capacity import theorem1_bound
from mhaaudit.reproduce import published, reproduce_paper, target_spec
from mhaaudit.reproduce.compare import (
    WHOLE_SET_ONLY,
    RunFacts,
    band_of,
    compare,
    record_evidence,
    setting_differences,
)
from mhaaudit.reproduce.memorization import compare_memorization
from mhaaudit.reproduce.published import TARGETS, missing_fields

# --------------------------------------------------------------------------- the published data


def _items(target, **match):
    return [it for it in target_spec(target)["values"] if all(it.get(k) == v for k, v in match.items())]


def _one(target, **match):
    (item,) = _items(target, **match)
    return item


def test_published_data_loads_and_is_complete():
    doc = published()
    assert missing_fields(doc) == []
    assert set(doc["targets"]) == set(TARGETS)
    assert doc["protocol"]["samples"] == 5000 and doc["protocol"]["threshold"] == 0.99
    assert doc["paper"]["arxiv"] == "2306.02010"
    for t in TARGETS:
        spec = target_spec(t)
        assert spec["values"] and spec["data"]["description"] and spec["protocol"] == doc["protocol"]
        assert all(it["source"] for it in spec["values"])


def test_published_values_are_the_papers():
    a1 = {
        c: _one("table1", column=c, check="assumption_1")["fraction"]
        for c in ("random", "random-attention", "trained", "embedding")
    }
    assert a1 == {"random": 1.0, "random-attention": 1.0, "trained": 0.9982, "embedding": 0.0}
    assert _one("table1", column="trained", check="assumption_1")["counts"] == {"197": 4991, "196": 9}
    ranks = {c: _one("table1", column=c, kind="ranks")["ranks"] for c in ("random", "random-attention", "trained")}
    assert ranks == {"random": [710, 723], "random-attention": [463, 482], "trained": [309, 318]}
    assert target_spec("table1")["data"]["T"] == 1973
    shape = {it["k"]: it["verdict"] for it in _items("figure1", kind="shape")}
    assert shape == {250: "about 1", 290: "about 0.5", 330: "about 0"}
    sweep = {(it["column"], it["k"]): it["fraction"] for it in _items("table3", kind="sweep")}
    for key, value in {
        ("random-L1", 341): 1.0,
        ("random-L1", 350): 0.9878,
        ("random-L1", 354): 0.9318,
        ("trained-L1", 290): 0.9996,
        ("trained-L1", 300): 0.9554,
        ("trained-L1", 304): 0.767,
    }.items():
        assert sweep[key] == value
    for col in ("random-L1", "trained-L1"):
        assert _one("table3", model="gpt2", column=col, check="assumption_1")["fraction"] == 1.0
        assert _one("table3", model="bert", column=col, check="assumption_1")["verdict"] == "fails"
    assert {it["value"] for it in _items("table3", kind="estimate")} == {349, 291}
    # Table 3's pattern: GP fails everywhere, A1 holds only at GPT-2 layer 1, A2 fails only for trained GPT-2
    assert {it["verdict"] for it in _items("table3", check="general_position")} == {"fails"}
    holds = {(it["model"], it["column"]) for it in _items("table3", check="assumption_1", verdict="holds")}
    assert holds == {("gpt2", "random-L1"), ("gpt2", "trained-L1")}
    a2_fails = {(it["model"], it["column"]) for it in _items("table3", check="assumption_2", verdict="fails")}
    assert a2_fails == {("gpt2", "trained-L0"), ("gpt2", "trained-L1")}
    assert {it["kind"] for it in target_spec("figure2")["values"]} == {"linear", "monotone", "theorem1"}


def test_missing_fields_are_named():
    doc = published()
    broken = copy.deepcopy(doc)
    del broken["targets"]["table3"]["values"][0]["verdict"]
    broken["targets"]["figure1"]["values"][0]["model"] = "nope"
    del broken["targets"]["figure2"]
    problems = missing_fields(broken)
    assert any("table3 item 0 (check): no 'verdict'" in p for p in problems)
    assert any("model 'nope'" in p for p in problems)
    assert "no target 'figure2'" in problems


def test_published_copies_are_independent():
    target_spec("table1")["values"].clear()
    assert target_spec("table1")["values"]


# --------------------------------------------------------------------------- holding records against items

FACTS = RunFacts(
    model="vit-base",
    resolved="google/vit-base-patch16-224-in21k",
    n=197,
    d=768,
    T=1973,
    data="imagenet-1k train",
    paper_data=True,
    samples=5000,
    threshold=0.99,
    seed=0,
    weights={"random": "random init", "trained": "hub google/vit-base-patch16-224-in21k"},
)


def rec(check="assumption_1", k=197, verdict="holds", satisfied=5000, samples=5000, **kw):
    f = satisfied / samples if samples else 0.0
    r = dict(
        check=check,
        k=k,
        T=1973,
        d=768,
        samples=samples,
        satisfied=satisfied,
        fraction=f,
        ci_low=max(0.0, f - 0.001),
        ci_high=min(1.0, f + 0.001),
        threshold=0.99,
        verdict=verdict,
        reason="",
        witness=[],
        rank_histogram={str(k): satisfied},
        sampled=True,
        set_rank_ceiling=768,
        planned_samples=None,
    )
    return r | kw


def col(*records, sweep=None, n=197):
    return {"records": {r["check"]: r for r in records}, "sweep": sweep, "n": n}


def test_same_verdict_matches_with_no_reason():
    item = _one("table1", column="random", check="assumption_1")
    c = compare("table1", item, col(rec()), FACTS, target_spec("table1"), 0.99)
    assert c.status == "match" and c.match is True and c.reason == ""
    assert (c.paper_verdict, c.paper_value, c.our_verdict, c.our_value) == ("holds", 1.0, "holds", 1.0)
    assert c.record()["match"] is True and c.record()["differences"] == []


def test_a_difference_is_explained_from_the_witness_and_the_interval():
    item = _one("table1", column="trained", check="assumption_1")  # the paper: holds, 0.9982
    r = rec(verdict="fails", satisfied=4940, witness=list(range(150)), ci_low=0.985, ci_high=0.9985)
    c = compare("table1", item, col(r), FACTS, target_spec("table1"), 0.99)
    assert c.status == "differs" and c.match is False
    assert "4940/5000 draws of 197 queries independent" in c.reason
    assert "a dependent 150-subset was found" in c.reason and "below 150" in c.reason
    assert "the published 0.9982 lies inside our 95% interval" in c.reason
    # the same data, model and draws as the paper's: the trained weights are the paper's checkpoint
    assert "differs from the paper's" not in c.reason and c.differences == ()


def test_a_whole_set_rank_below_k_and_n_above_d_are_the_reason():
    item = _one("table3", model="gpt2", column="random-L1", check="assumption_1")  # the paper: holds
    facts = RunFacts(
        model="gpt2-large",
        resolved="gpt2-large",
        n=1024,
        d=1280,
        T=2000,
        data="built-in text",
        paper_data=False,
        samples=5000,
        threshold=0.99,
        seed=0,
    )
    proven = rec(
        k=1024,
        verdict="fails",
        satisfied=0,
        samples=0,
        sampled=False,
        set_rank_ceiling=900,
        reason="the whole set has numerical rank 900 (at most 900 for any 1024-subset under the rule), so no "
        "1024 rows are independent (no sampling needed)",
    )
    c = compare("table3", item, col(proven, n=1024), facts, target_spec("table3"), 0.99)
    assert c.status == "differs" and "whole set has numerical rank 900" in c.reason
    assert "this run differs from the paper's in data" in c.reason
    assert c.differences[0].startswith("data: built-in text (the paper: 2000 Wikipedia")
    a2 = rec(check="assumption_2", k=1024, verdict="fails", satisfied=0, samples=2000, rank_histogram={"1000": 2000})
    a2["d"] = 1000
    item2 = _one("table3", model="gpt2", column="random-L1", check="assumption_2")
    c2 = compare("table3", item2, col(a2, n=1024), facts, target_spec("table3"), 0.99)
    assert "0/1973 context matrices have rank n = 1024" in c2.reason and "n = 1024 > d = 1000" in c2.reason
    assert "ranks {1000: 2000}" in c2.reason


def test_unavailable_columns_say_why():
    item = _one("table1", column="trained", check="assumption_1")
    c = compare(
        "table1",
        item,
        {"unavailable": "trained weights for vit-base are not on this machine"},
        FACTS,
        target_spec("table1"),
        0.99,
    )
    assert c.status == "unavailable" and c.match is None and "not on this machine" in c.reason
    assert compare("table1", item, None, FACTS, target_spec("table1"), 0.99).status == "unavailable"


def test_ranks_match_when_the_ranges_overlap():
    spec = target_spec("table1")
    item = _one("table1", column="random", kind="ranks")  # 710-723
    gp = rec(
        check="general_position", k=768, verdict="fails", satisfied=0, samples=51, rank_histogram={"715": 6, "730": 4}
    )
    c = compare("table1", item, col(gp), FACTS, spec, 0.99)
    assert (c.our_verdict, c.status) == ("ranks 715-730", "match")
    far = gp | {"rank_histogram": {"600": 10}}
    c = compare("table1", item, col(far), FACTS, spec, 0.99)
    assert c.status == "differs" and c.our_verdict == "ranks 600"
    # decided without draws (the whole set's rank): the ranks of a few draws computed for the comparison
    proven = gp | {
        "sampled": False,
        "set_rank_ceiling": 500,
        "rank_histogram": {},
        "reason": "the whole set has numerical rank 500 (at most 520 for any 768-subset under the rule)",
    }
    c = compare("table1", item, col(proven) | {"draw_ranks": {"498": 4, "500": 6}}, FACTS, spec, 0.99)
    assert (c.our_verdict, c.status) == ("ranks 498-500", "differs")
    assert (
        "whole set has numerical rank 500" in c.reason
        and "the ranks of 10 draws of 768 queries were computed" in c.reason
    )
    assert compare("table1", item, col(proven), FACTS, spec, 0.99).status == "undetermined"  # no draw ranks
    emb = _one("table1", column="embedding", kind="ranks")  # rank 1: every [CLS] query is the same vector
    one = proven | {"set_rank_ceiling": 1}
    assert compare("table1", emb, col(one), FACTS, spec, 0.99).status == "match"


def _sweep(fractions, threshold=0.99, estimate=None, ceiling=None, sampled_up_to=None):
    ks = range(1, len(fractions) + 1)
    est = (
        estimate
        if estimate is not None
        else max([k for k, f in zip(ks, fractions, strict=False) if f >= threshold] or [0])
    )
    top = sampled_up_to or len(fractions)  # sizes above it were not sampled: fraction 0, interval [0, 0]
    return {
        "rows": [
            {"k": k, "fraction": f, "ci_low": max(0.0, f - 0.01), "ci_high": min(1.0, f + 0.01) if k <= top else 0.0}
            for k, f in zip(ks, fractions, strict=False)
        ],
        "summary": {
            "estimate": est,
            "ceiling": {"value": ceiling or len(fractions), "kind": "dimension", "proves": "min(T, d)"},
            "floor": {"value": 2, "kind": "babel", "proves": "..."},
        },
        "samples": 5000,
        "threshold": threshold,
    }


def test_sweep_points_and_estimates():
    spec = target_spec("table3")
    facts = RunFacts(
        model="bert-large",
        resolved="bert-large-uncased",
        n=512,
        d=1024,
        T=2000,
        data="wikipedia 20220301.en",
        paper_data=True,
        samples=5000,
        threshold=0.99,
        seed=0,
    )
    fr = [1.0] * 345 + [0.985] * 10 + [0.0] * 200
    c = col(sweep=_sweep(fr), n=512)
    at = {
        it["k"]: compare("table3", it, c, facts, spec, 0.99)
        for it in _items("table3", column="random-L1", kind="sweep")
    }
    assert at[341].status == "match" and at[341].our_verdict == "holds"
    assert at[349].status == "differs" and "fraction 0.9850 at k = 349" in at[349].reason  # the paper: .9928
    assert "the published 0.9928 lies inside our 95% interval" in at[349].reason
    assert at[354].status == "match" and at[354].our_verdict == "fails"
    est = compare("table3", _one("table3", column="random-L1", kind="estimate"), c, facts, spec, 0.99)
    assert (est.our_verdict, est.our_value, est.paper_value, est.status) == ("below n", 345.0, 349.0, "match")
    high = col(sweep=_sweep([1.0] * 600), n=512)
    est = compare("table3", _one("table3", column="random-L1", kind="estimate"), high, facts, spec, 0.99)
    assert est.status == "differs" and "Kruskal-rank estimate 600" in est.reason
    # a k beyond min(T, d) of the audited model is a proof of dependence
    small = col(sweep=_sweep([1.0] * 32), n=17)
    beyond = compare("table3", _one("table3", column="random-L1", kind="sweep", k=341), small, facts, spec, 0.99)
    assert beyond.our_value == 0.0 and "k = 341 > min(T, d) = 32" in beyond.reason
    # sizes above the whole set's rank are not sampled: a proof; a sampled 0 is an estimate
    cut = col(sweep=_sweep([1.0] * 340 + [0.0] * 100, sampled_up_to=342), n=512)
    at = {
        it["k"]: compare("table3", it, cut, facts, spec, 0.99)
        for it in _items("table3", column="random-L1", kind="sweep")
    }
    assert "above every size the whole set's numerical rank allows" in at[345].reason and at[345].ci_high == 0.0
    assert "fraction 0.0000 at k = 341 (95% CI [0.0000, 0.0100])" in at[341].reason
    none = compare("table3", _one("table3", column="random-L1", kind="sweep", k=341), col(), facts, spec, 0.99)
    assert none.status == "undetermined" and "no sweep" in none.reason


def test_figure1_levels_use_the_published_bands():
    spec = target_spec("figure1")
    bands = spec["bands"]
    assert band_of(1.0, bands) == "about 1" and band_of(0.5, bands) == "about 0.5" and band_of(0.01, bands) == "about 0"
    assert band_of(0.9, bands) == "between"
    fr = [1.0] * 260 + [0.5] * 40 + [0.0] * 468
    c = col(sweep=_sweep(fr), n=197)
    got = {it["k"]: compare("figure1", it, c, FACTS, spec, 0.99).status for it in _items("figure1", kind="shape")}
    assert got == {250: "match", 290: "match", 330: "match"}
    shifted = col(sweep=_sweep([1.0] * 200 + [0.0] * 568), n=197)
    c250 = compare("figure1", _one("figure1", kind="shape", k=250), shifted, FACTS, spec, 0.99)
    assert c250.status == "differs" and c250.our_verdict == "about 0" and "fraction 0.0000 at k = 250" in c250.reason


def test_a_run_with_no_more_rows_than_k_holds_nothing_against_the_paper():
    """One rule for every kind of item: where the run has T <= k rows, its test is of the whole set (or of none),
    so the item is undetermined and says why; the sweep's points below T are compared as before."""
    spec = target_spec("figure1")
    c = col(sweep=_sweep([1.0] * 250) | {"T": 250}, n=197)
    at = {it["k"]: compare("figure1", it, c, FACTS, spec, 0.99) for it in _items("figure1")}
    assert at[197].status == "match"
    for k in (250, 290, 330, 768):
        assert at[k].status == "undetermined" and at[k].our_detail == WHOLE_SET_ONLY, k
        assert at[k].ci_low is None and "so the paper's k-subsets are not tested" in at[k].reason
    assert "k = T = 250: the only 250-subset of this run's rows is the whole set" in at[250].reason
    assert "k = 290 > T = 250: no 290 of this run's rows can be independent" in at[290].reason
    assert at[768].our_verdict == "fails" and "lies inside our 95% interval" not in at[768].reason
    # the Kruskal estimate against n, where T <= n: no estimate from T rows reaches n, so it is no evidence
    t3 = target_spec("table3")
    est = compare(
        "table3",
        _one("table3", column="random-L1", kind="estimate"),
        col(sweep=_sweep([1.0] * 300) | {"T": 300}, n=512),
        FACTS,
        t3,
        0.99,
    )
    assert est.status == "undetermined" and "n = 512 >= T = 300: no estimate from 300 rows can reach n" in est.reason
    # the ranks of d-subsets, where the run's test is of the whole set: undetermined too, as the check itself
    item = _one("table1", column="random", kind="ranks")
    whole = rec(check="general_position", k=250, T=250, verdict="holds", scope="whole-set", sampled=False)
    whole |= {"satisfied": 1, "samples": 1, "set_rank_ceiling": 250}
    got = compare("table1", item, col(whole), FACTS, target_spec("table1"), 0.99)
    assert got.status == "undetermined" and got.our_detail == WHOLE_SET_ONLY and got.our_verdict == "ranks 250"


def test_a_reason_keeps_the_parameters_it_names_so_the_command_line_writes_its_flags():
    """The reason of an undetermined item names ``limit`` as a parameter: the library says ``raise limit``, the
    command line (``with_flags``) ``raise --limit``, as a check's own reason does (it printed ``raise limit``)."""
    from mhaaudit.cli.names import with_flags
    from mhaaudit.errors import Message, Param

    spec = target_spec("table1")
    whole = rec(check="general_position", k=200, T=200, verdict="holds", scope="whole-set", sampled=False)
    whole |= {
        "satisfied": 1,
        "samples": 1,
        "reason": Message("k = T = 200: the only subset is the whole set (raise ", Param("limit"), " above d = 768)"),
    }
    item = _one("table1", column="random", check="general_position", kind="check")
    got = compare("table1", item, col(whole), FACTS, spec, 0.99)
    assert got.status == "undetermined" and "(raise limit above d = 768)" in got.reason
    assert "(raise --limit above d = 768)" in with_flags(got).reason
    swept = col(sweep=_sweep([1.0] * 250) | {"T": 250}, n=197)
    short = compare("figure1", _one("figure1", k=768), swept, FACTS, target_spec("figure1"), 0.99)
    assert "(a larger limit tests them)" in short.reason
    assert "(a larger --limit tests them)" in with_flags(short).reason


def test_an_unavailable_columns_reason_in_the_run_lines_keeps_the_flags_it_names():
    """The "This run" line of an unavailable column keeps the parameters its reason names: the command line wrote
    "pass weights PATH" where the same reason in the notes said "pass --weights PATH"."""
    from mhaaudit.cli.names import with_flags
    from mhaaudit.errors import Message, Param
    from mhaaudit.reproduce.targets import _setting_lines
    from mhaaudit.settings import Settings

    why = Message("trained weights are not on this machine; pass ", Param("weights"), " PATH")
    facts = dataclasses.replace(FACTS, weights={"random": "random init", "trained": why})
    lines = with_flags(_setting_lines(target_spec("table1"), {"vit": facts}, Settings.resolve()))
    assert "  trained: trained weights are not on this machine; pass --weights PATH" in lines
    assert "  random: random init" in lines


def test_setting_differences_name_each_change():
    spec = target_spec("table1")
    assert setting_differences(spec, "vit", FACTS, "trained") == []
    other = RunFacts(
        model="/tiny",
        resolved="/tiny",
        n=17,
        d=32,
        T=40,
        data="image folder /imgs",
        paper_data=False,
        samples=100,
        threshold=0.95,
        seed=3,
        weights={"trained": "local folder /tiny"},
    )
    labels = [d.label for d in setting_differences(spec, "vit", other, "trained")]
    assert labels == [
        "data",
        "model (n = 17, d = 32)",
        "trained weights (local folder /tiny)",
        "T (40)",
        "draws (100)",
        "threshold (0.95)",
    ]
    texts = [d.text for d in setting_differences(spec, "vit", other, "random")]
    assert not any("trained" in t for t in texts)
    snap = RunFacts(
        model="bert-large",
        resolved="bert-large-uncased",
        n=512,
        d=1024,
        T=2000,
        data="hub wikimedia/wikipedia 20231101.en",
        paper_data=True,
        samples=5000,
        threshold=0.99,
        seed=0,
    )
    assert [d.label for d in setting_differences(target_spec("table3"), "bert", snap)] == ["data snapshot"]


def test_random_columns_in_the_papers_setting_name_the_weight_draw():
    item = _one("table1", column="random", check="assumption_1")
    c = compare("table1", item, col(rec(verdict="fails", satisfied=4000)), FACTS, target_spec("table1"), 0.99)
    assert "the random weights are another draw (seed 0" in c.reason


def test_evidence_of_an_early_stop():
    r = rec(verdict="fails", satisfied=9, samples=60, planned_samples=5000, set_rank_ceiling=700, witness=[1, 2, 3])
    text = record_evidence(r)
    assert "sampling stopped after 60 of 5000 draws" in text and "whole set has rank 700 < min(T, d) = 768" in text


# --------------------------------------------------------------------------- Figure 2


def run_(H, T, count, steps=6000, epochs=1500):
    return dict(
        heads=H,
        n=32,
        head_dim=64,
        size=T,
        memorized=count / T,
        memorized_count=count,
        steps_run=steps,
        planned_steps=steps,
        epochs_run=epochs,
        final_loss=0.5,
    )


def fit_(T, slope, r2, xs=(1, 2, 4, 8)):
    return dict(size=T, slope=slope, intercept=0.0, r2=r2, points=len(xs), xs=list(xs))


def bound(run):
    return theorem1_bound(heads=run["heads"], head_dim=run["head_dim"], n=run["n"], d=64, a1_holds=True, a2_holds=True)


def test_figure2_linear_monotone_and_theorem1():
    spec = target_spec("figure2")
    runs = [run_(h, 1000, 120 * h) for h in (1, 2, 4, 8)]
    comps = compare_memorization("figure2", spec, runs, [fit_(1000, 120.0, 0.999)], bound)
    kinds = {c.kind: c for c in comps if c.kind != "theorem1"}
    assert kinds["linear"].status == "match" and kinds["linear"].our_value == 0.999
    assert kinds["monotone"].status == "match"
    th = [c for c in comps if c.kind == "theorem1"]
    assert [c.paper_value for c in th] == [32.0, 63.0, 125.0, 249.0]  # H (32 - 1) + 1
    assert all(c.status == "match" for c in th)


def test_a_figure2_file_has_the_schema_of_a_table1_file():
    """reproduce's rows are typed by the schema, not by what one run happens to hold: a Figure 2 file (no k, no
    interval, no check, no differences) had its k, our_k, ci_low, ci_high and check columns typed null and its
    differences list<null>, where a Table 1 file types them int64, float64, string and list<string>."""
    from mhaaudit.tables import records_table

    spec = target_spec("figure2")
    runs = [run_(h, 1000, 120 * h) for h in (1, 2, 4, 8)]
    fig2 = [c.record() for c in compare_memorization("figure2", spec, runs, [fit_(1000, 120.0, 0.999)], bound)]
    assert all(r["k"] is None and r["ci_low"] is None and r["differences"] == [] for r in fig2)
    item = _one("table1", column="random", check="assumption_1")
    tab1 = [compare("table1", item, col(rec()), FACTS, target_spec("table1"), 0.99).record()]
    sweep = [{"check": "sweep", "model": "vit", "column": "random", "k": 1, "fraction": 1.0, "ci_low": 0.9,
              "ci_high": 1.0, "exact_status": "holds", "exact_basis": "certified-floor"}]  # fmt: skip
    meta = {"command": "reproduce"}
    a, b = records_table(fig2, meta).schema, records_table(tab1 + sweep, meta).schema
    types = {f.name: str(f.type) for f in b}
    assert {f.name: str(f.type) for f in a} == {k: v for k, v in types.items() if k in a.names}
    assert types["k"] == "int64" and types["differences"] == "list<item: string>" and types["match"] == "bool"
    assert str(a.field("ci_low").type) == "double" and str(a.field("check").type) == "string"


def test_figure2_rows_say_what_they_compare_at_the_width_of_a_pipe():
    """At 100 columns (stdout to a file or a pipe) the grid points' long names squeezed the "what" column of
    Figure 2's table to one character ("…"): no row said whether it compared the linear fit, the rise or Theorem
    1's count. The long names wrap now, and every row's "what" is whole."""
    import io
    from types import SimpleNamespace

    from mhaaudit.console import TextConsole
    from mhaaudit.render.reproduction import reproduction_table

    spec = target_spec("figure2")
    runs = [run_(h, 1000, 12 * h) for h in (2, 4, 8)]
    comps = compare_memorization("figure2", spec, runs, [fit_(1000, 120.0, 0.5, xs=(2, 4, 8))], bound)
    table, _ = reproduction_table(SimpleNamespace(comparisons=comps, title="Figure 2(a)"))
    buf = io.StringIO()
    TextConsole(file=buf, width=100).print(table)
    out = buf.getvalue()
    assert max(len(line) for line in out.splitlines()) <= 100
    for what in ("linear in H", "rises with H", "Theorem 1 count"):
        assert f"│ {what} " in out
    assert out.count("│ Theorem 1 count ") == 3 and "…" not in out


def test_figure2_differences_are_explained_from_the_runs():
    spec = target_spec("figure2")
    runs = [run_(1, 500, 20, steps=300), run_(2, 500, 10, steps=300), run_(3, 500, 40, steps=300)]
    runs.append(run_(4, 500, 500, steps=300))
    comps = compare_memorization("figure2", spec, runs, [fit_(500, 5.0, 0.6, xs=(1, 2, 3))], bound)
    lin = next(c for c in comps if c.kind == "linear")
    assert lin.status == "differs" and "r2 = 0.6000 < 0.95" in lin.reason
    assert (
        "trained at most 300 steps" in lin.reason
        and "the paper trains at least 500 epochs and 50000 steps" in lin.reason
    )
    mono = next(c for c in comps if c.kind == "monotone")
    assert mono.status == "differs" and "falls from 20 at H = 1 to 10 at H = 2" in mono.reason
    th1 = next(c for c in comps if c.kind == "theorem1" and c.column.startswith("H = 1,"))
    assert th1.status == "differs" and "memorised 20 of 500 examples after 300 of 300 planned steps" in th1.reason
    th4 = next(c for c in comps if c.kind == "theorem1" and c.column.startswith("H = 4,"))
    assert th4.status == "match"  # 500 memorised >= min(T, 4 (32 - 1) + 1) = 125
    no_fit = compare_memorization("figure2", spec, runs, [], bound)
    lin = next(c for c in no_fit if c.kind == "linear")
    assert lin.status == "undetermined" and "H = [4]" in lin.reason


def test_a_line_through_two_points_is_no_evidence_of_a_linear_rise():
    """Two points below saturation always fit a line (r2 = 1): the comparison is undetermined, and says why."""
    spec = target_spec("figure2")
    runs = [run_(1, 200, 20), run_(2, 200, 60), run_(4, 200, 198)]
    comps = compare_memorization("figure2", spec, runs, [fit_(200, 40.0, 1.0, xs=(1, 2))], bound)
    lin = next(c for c in comps if c.kind == "linear")
    assert lin.status == "undetermined" and lin.our_verdict is None
    assert "only 2 of the 3 values of H have points below saturation (at H = [1, 2];" in lin.reason
    assert "at H = [4]" in lin.reason and "a line fits two points exactly" in lin.reason


def test_a_diverged_point_is_said_to_have_diverged_not_to_have_trained_too_little():
    spec = target_spec("figure2")
    runs = [run_(1, 200, 40), run_(2, 200, 80), dict(run_(4, 200, 0), diverged=True, final_loss=None)]
    runs.append(run_(8, 200, 190))
    comps = compare_memorization("figure2", spec, runs, [], bound)
    th4 = next(c for c in comps if c.kind == "theorem1" and c.column.startswith("H = 4,"))
    assert th4.status == "differs" and "final loss not finite" in th4.reason
    assert "the training diverged at H = [4] (a loss that is not finite)" in th4.reason
    lin = next(c for c in comps if c.kind == "linear")  # no fit was given: H = 4 is not counted below saturation
    assert "(at H = [1, 2, 8];" in lin.reason


def test_one_head_cannot_reach_the_count_with_a_hundred_classes():
    """With one head the class scores are multiples of one vector: only class 0 and two others can be predicted.
    A point whose labels put fewer examples there than Theorem 1's count cannot test it, and says so."""
    spec = target_spec("figure2")
    runs = [dict(run_(1, 200, 11), classes=100), run_(2, 200, 70)]
    comps = compare_memorization("figure2", spec, runs, [], bound, most=lambda r: 14 if r["heads"] == 1 else None)
    one, two = (c for c in comps if c.kind == "theorem1")
    assert one.status == "undetermined" and one.our_value == 11.0 and one.our_verdict is None
    assert "no weights memorise more than 14 of these 200 examples" in one.reason
    assert "below min(T, 32) = 32" in one.reason and "100 class scores" in one.reason
    assert two.status == "match"  # no limit below T known: 70 >= min(T, 2 (32 - 1) + 1) = 63


def test_figure2_nan_fit_is_not_linear():
    spec = target_spec("figure2")
    runs = [run_(h, 60, 3) for h in (1, 2, 4)]
    lin = next(
        c for c in compare_memorization("figure2", spec, runs, [fit_(60, 0.0, math.nan)], bound) if c.kind == "linear"
    )
    assert lin.status == "differs" and lin.our_value is None and "slope 0.00 <= 0" in lin.reason


# --------------------------------------------------------------------------- the targets on tiny models


@pytest.fixture(scope="module")
def tiny_table1(vit_dir, image_dir):
    return reproduce_paper(
        "table1", model={"vit": str(vit_dir)}, data=str(image_dir), limit=20, samples=40, device="cpu"
    )


def test_table1_on_a_tiny_vit(tiny_table1, vit_dir):
    r = tiny_table1
    assert len(r.comparisons) == len(target_spec("table1")["values"])
    assert {c.status for c in r.comparisons} <= {"match", "differs", "undetermined"}
    # the folder is a trained model: its trained column ran, from the folder
    assert str(vit_dir) in r.facts["vit"].weights["trained"]
    # T = 20 < d = 32: General Position is decided without draws; the ranks of a few draws are computed
    assert all(c.our_verdict for c in r.comparisons if c.kind == "ranks")
    emb = next(c for c in r.comparisons if c.column == "embedding" and c.check == "assumption_1")
    assert emb.status == "match" and emb.our_k == 17 and emb.k == 197
    for c in r.comparisons:
        if c.status == "differs":
            assert "model (n = 17, d = 32)" in c.reason and "T (20)" in c.reason, c
    assert any(
        "differs from the paper's: data (the paper: the first 2000 images of ImageNet-1k" in line for line in r.setting
    )
    assert r.counts()["match"] + r.counts()["differs"] + r.counts()["undetermined"] == len(r.comparisons)


def test_a_model_folder_is_named_on_one_line_in_the_report(vit_dir, image_dir, tmp_path):
    """The report's account of the run names the model folder as written: a line break in its name cannot
    start a line of the report, and ``[bold]`` in it is not read as markup."""
    import io
    import shutil

    from mhaaudit.console import TextConsole
    from mhaaudit.render.reproduction import reproduction_report

    folder = tmp_path / "v[bold]x\nGeneral Position: matches the paper"
    shutil.copytree(vit_dir, folder)
    r = reproduce_paper("table1", model={"vit": str(folder)}, data=str(image_dir), limit=20, samples=40, device="cpu")
    buf = io.StringIO()
    con = TextConsole(file=buf, width=400)
    for item in reproduction_report(r):
        con.print(item, highlight=False)
    out = buf.getvalue()
    assert not [line for line in out.splitlines() if line.lstrip(" │").startswith("General Position: matches")]
    assert "v[bold]x\\x0aGeneral Position: matches the paper" in out


def test_the_settings_of_a_target_are_a_record_with_the_meta_it_always_had(tiny_table1, image_dir):
    from mhaaudit.reproduce import TargetSettings
    from mhaaudit.settings import Settings

    s = tiny_table1.settings
    assert isinstance(s, TargetSettings) and s.models == ("vit",) and s.limit == 20 and s.samples == 40
    assert s.data == str(image_dir) and s.tolerance.dtype == "float32"
    meta = tiny_table1.meta()
    run = Settings.resolve(samples=40, device="cpu", stop_when_decided=True)
    expected = dict(run.as_dict(), limit=20, data=str(image_dir), models=["vit"])
    assert {k: meta[k] for k in expected} == expected and list(meta)[-len(expected) :] == list(expected)
    apart = TargetSettings.of(Settings.resolve(weights_seed=3), limit=5, data=None)
    assert apart.as_dict()["weights_seed"] == 3 and "models" not in apart.as_dict()  # figure1 has no model keys


def test_the_target_is_checked():
    from mhaaudit.errors import InputError

    with pytest.raises(InputError, match="unknown target 'table2'"):
        reproduce_paper("table2")
    with pytest.raises(InputError, match=r"^model foo=...: this target's models are vit"):
        reproduce_paper("table1", model={"foo": "x"})


def test_a_target_takes_its_run_as_one_request_and_refuses_a_keyword_that_disagrees():
    import dataclasses

    from mhaaudit.errors import InputError
    from mhaaudit.reproduce.request import TargetRequest, target_request
    from mhaaudit.reproduce.targets import figure1, table1
    from mhaaudit.settings import Settings

    request = target_request(None, {"limit": "12", "seed": 3, "device": "cpu", "models": []})
    assert request == TargetRequest(limit=12, settings=Settings.resolve(seed=3, device="cpu", stop_when_decided=True))
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.limit = 5  # type: ignore[misc]
    with pytest.raises(InputError, match=r"^seed = 4 disagrees with the Settings given"):
        table1(request, seed=4)
    with pytest.raises(
        InputError, match=r"^limit = 5 disagrees with the TargetRequest given as request \(limit = 12\)"
    ):
        table1(request, limit=5)
    with pytest.raises(InputError, match="weights does not apply to figure1"):
        figure1(dataclasses.replace(request, weights={"vit": "x"}))


def test_vary_without_seeds_is_refused_before_any_work():
    """``reproduce_paper`` refuses ``vary`` without ``seeds`` with the words ``check`` uses."""
    from mhaaudit.errors import InputError

    with pytest.raises(InputError, match="vary has no effect without seeds") as info:
        reproduce_paper("table1", vary="weights")
    assert info.value.param == "vary"
