"""Holding one published value against this run's record of the same thing.

A :class:`Comparison` puts the paper's verdict and number beside ours (with our 95%
Clopper-Pearson interval where ours is a Monte-Carlo estimate) and says whether they *match*:
the same verdict. Where they differ, or ours cannot decide, the reason is assembled from the
run's own records: the test's counts, a dependent subset found (its size is a proof that the
Kruskal rank is below it), a whole-set rank below k, n > d, the sweep's certified bounds; then
what this run did differently from the paper (:func:`setting_differences`: its data, model,
weights, T, draws, threshold). Figure 2's memorisation grid is held to the paper in
:mod:`.memorization`. Nothing here runs a model or a test: the functions read records (plain
dicts) and :class:`RunFacts`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import Param, joined

STATUSES = ("match", "differs", "undetermined", "unavailable")


@dataclass(frozen=True)
class RunFacts:
    """What one model's run was, as the records of the run state it."""

    model: str  # the model as given (alias, hub id, folder)
    resolved: str  # what it resolved to
    n: int | None
    d: int | None
    T: int | None
    data: str  # the data source's own description
    paper_data: bool  # the data is the paper's dataset
    samples: int
    threshold: float
    seed: int
    weights: dict[str, str] = field(default_factory=dict)  # column -> weights source, in words


@dataclass(frozen=True)
class Comparison:
    """One published value beside ours."""

    target: str
    model: str  # the paper's model key (vit, bert, gpt2, memorize)
    column: str
    kind: str
    check: str | None
    k: int | None
    paper_verdict: str
    paper_value: float | None
    paper_detail: str
    source: str
    our_verdict: str | None
    our_value: float | None
    ci_low: float | None
    ci_high: float | None
    our_detail: str
    status: str  # match | differs | undetermined | unavailable
    reason: str
    differences: tuple[str, ...] = ()  # how this model's run differs from the paper's, in full
    our_k: int | None = None  # the subset size our test used (the audited model's n or d)

    @property
    def match(self) -> bool | None:
        """Whether ours matches the paper's: True, False, or None where it cannot be said."""
        return {"match": True, "differs": False}.get(self.status)

    def record(self) -> dict:
        """The comparison as one row of the output (its differences a list, ``match`` with them)."""
        return asdict(self) | {"differences": list(self.differences), "match": self.match}


@dataclass(frozen=True)
class Difference:
    """One way a run differs from the paper's protocol: a short ``label`` for a reason, the full
    ``text`` for the records, and what the ``paper`` had."""

    label: str
    text: str
    paper: str

    def brief(self) -> str:
        """The difference in a few words: ours, then the paper's."""
        return f"{self.label} (the paper: {self.paper})"


#: Our detail where a run has T <= k rows: its test is of the whole set (or none), held against no published value.
WHOLE_SET_ONLY = "whole set only (k >= T), not the paper's test"


@dataclass(frozen=True)
class Ours:
    """Our side of one comparison: ``agrees`` is None when our evidence cannot decide."""

    verdict: str | None
    value: float | None
    detail: str
    evidence: str
    agrees: bool | None
    ci: tuple[float | None, float | None] = (None, None)
    k: int | None = None


# --------------------------------------------------------------------------- the paper's side


def paper_side(item: dict, threshold: float) -> tuple[str, float | None, str]:
    """(verdict, value, detail) of a published item; sweep points take their verdict from ``threshold``."""
    kind = item["kind"]
    counts = item.get("counts")
    shown = f"ranks seen {_counts(counts)}" if counts else ""
    if kind == "check":
        if "satisfied" in item:
            return item["verdict"], item.get("fraction"), f"{item['satisfied']}/{item['T']} full rank"
        return item["verdict"], item.get("fraction"), shown or item.get("note", "")
    if kind == "ranks":
        lo, hi = item["ranks"]
        return _range_text(lo, hi), None, "ranks of the draws of k = d queries"
    if kind == "sweep":
        return ("holds" if item["fraction"] >= threshold else "fails"), item["fraction"], shown
    if kind == "shape":
        return item["verdict"], None, "read off the figure"
    if kind == "estimate":
        return item["verdict"], float(item["value"]), f"estimated Kruskal rank {item['value']}, n = {item['k']}"
    return item["verdict"], None, item.get("formula", "")


def _counts(counts: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: -int(kv[0]))) + "}"


def _range_text(lo: int, hi: int) -> str:
    return f"ranks {lo}" if lo == hi else f"ranks {lo}-{hi}"


# --------------------------------------------------------------------------- evidence of one record


def record_evidence(rec: dict) -> str:
    """What a check's record shows, in one sentence built from its fields."""
    check, k, d = rec["check"], rec["k"], rec["d"]
    if check == "assumption_2":
        out = f"{rec['satisfied']}/{rec['T']} context matrices have rank n = {k}"
        ranks = {int(r): c for r, c in rec.get("rank_histogram", {}).items() if int(r) != k}
        if ranks:
            out += f" (the others: ranks {_counts({str(r): c for r, c in ranks.items()})})"
        if k > d:
            out += f"; n = {k} > d = {d}, so no context matrix can have rank n"
        return out
    if not rec.get("sampled", True):
        return rec["reason"]
    rows = "query + context-mean vectors" if check == "assumption_3" else "queries"
    out = (
        f"{rec['satisfied']}/{rec['samples']} draws of {k} {rows} independent (fraction {rec['fraction']:.4f}, "
        f"95% CI [{rec['ci_low']:.4f}, {rec['ci_high']:.4f}], threshold {rec['threshold']})"
    )
    if rec.get("planned_samples"):
        out += (
            f"; sampling stopped after {rec['samples']} of {rec['planned_samples']} draws once the verdict was settled"
        )
    if rec.get("witness"):
        size = len(rec["witness"])
        out += f"; a dependent {size}-subset was found, a proof that the Kruskal rank is below {size}"
    if rec.get("set_rank_ceiling") is not None and rec["set_rank_ceiling"] < min(rec["T"], d):
        out += (
            f"; the whole set has rank {rec['set_rank_ceiling']} < min(T, d) = {min(rec['T'], d)} at the smallest "
            f"tolerance any {k}-subset can have (a ceiling for every draw)"
        )
    return out


def _sweep_evidence(sweep: dict) -> str:
    s = sweep["summary"]
    return (
        f"Kruskal-rank estimate {s['estimate']} over {sweep['samples']} nested draws (threshold {sweep['threshold']}); "
        f"certified ceiling {s['ceiling']['value']} ({s['ceiling']['kind']}), floor {s['floor']['value']}"
    )


# --------------------------------------------------------------------------- our side, by kind


def _ours_check(item: dict, col: dict) -> Ours:
    rec = col["records"].get(item["check"])
    if rec is None or rec.get("verdict") == "unavailable":
        return Ours(None, None, "not run", (rec or {}).get("reason", "not run"), None)
    if item["check"] == "assumption_2":
        detail = f"{rec['satisfied']}/{rec['T']} full rank"
    elif rec.get("sampled", True):
        detail = f"{rec['satisfied']}/{rec['samples']} independent"
    else:
        detail = "proven without sampling"
    ci = (rec["ci_low"], rec["ci_high"]) if rec.get("sampled", True) else (None, None)
    # The paper's tables report the estimate under its rule: that is the verdict compared. The exact
    # status is shown beside it where a proof decides it; a test of the whole set (k >= T) is no
    # sample of k-subsets and cannot be held against the paper's value.
    if rec.get("exact_status") in ("holds", "fails") and item["check"] != "assumption_2":
        detail += f"; exact: {rec['exact_status']} ({rec.get('exact_basis')})"
    if rec.get("scope") == "whole-set":
        return Ours(
            rec["verdict"],
            rec["fraction"],
            f"{detail}; {WHOLE_SET_ONLY}",
            record_evidence(rec),
            None,
            ci,
            rec["k"],
        )
    return Ours(
        rec["verdict"], rec["fraction"], detail, record_evidence(rec), rec["verdict"] == item["verdict"], ci, rec["k"]
    )


def _ours_ranks(item: dict, col: dict) -> Ours:
    rec = col["records"].get(item["check"])
    if rec is None or rec.get("verdict") == "unavailable":
        return Ours(None, None, "not run", (rec or {}).get("reason", "not run"), None)
    plo, phi = item["ranks"]
    k = rec["k"]
    hist = rec.get("rank_histogram") or {}
    evidence = record_evidence(rec)
    if rec.get("scope") == "whole-set":  # as _ours_check: no sample of the paper's k-subsets
        r = rec.get("set_rank_ceiling")
        shown = _range_text(r, r) if r is not None else None
        return Ours(shown, None, WHOLE_SET_ONLY, evidence, None, k=k)
    if not rec.get("sampled", True):
        r = rec.get("set_rank_ceiling")
        if r is not None and r <= 1:  # every subset of a rank-1 set of nonzero rows has rank 1
            return Ours(_range_text(r, r), None, "whole-set rank", evidence, plo <= r <= phi, k=k)
        hist = col.get("draw_ranks") or {}
        if hist:
            evidence += f"; the ranks of {sum(hist.values())} draws of {k} queries were computed for this comparison"
    ranks = [int(x) for x in hist]
    if not ranks:
        return Ours(None, None, "no ranks recorded", evidence, None)
    lo, hi = min(ranks), max(ranks)
    return Ours(
        _range_text(lo, hi),
        None,
        f"ranks of {sum(hist.values())} examined draws",
        evidence,
        lo <= phi and plo <= hi,
        k=k,
    )


def _sweep_point(item: dict, col: dict) -> tuple[dict | None, str]:
    """Our sweep's row at the item's k (``"short"`` in it when the run has no more than k rows) and its evidence."""
    sweep = col.get("sweep")
    if sweep is None:
        return None, "no sweep was run for this column"
    rows = {r["k"]: r for r in sweep["rows"]}
    k, T = item["k"], sweep.get("T")
    if T is not None and k >= T:  # the whole set or none: no sample of the paper's k-subsets (as _ours_check)
        fraction = rows[k]["fraction"] if k in rows else 0.0
        what = (
            f"k = {k} > T = {T}: no {k} of this run's rows can be independent"
            if k > T
            else f"k = T = {T}: the only {k}-subset of this run's rows is the whole set"
        )
        return {"k": k, "fraction": fraction, "ci_low": None, "ci_high": None, "proven": True, "short": True}, (
            f"{what}, so the paper's k-subsets are not tested (a larger "
            + Param("limit")
            + " tests them); "
            + _sweep_evidence(sweep)
        )
    if k not in rows:
        K = max(rows) if rows else 0
        return (
            {"k": k, "fraction": 0.0, "ci_low": 0.0, "ci_high": 0.0, "proven": True},
            f"k = {k} > min(T, d) = {K}: no {k} rows can be independent (a proof)",
        )
    row = rows[k]
    if (
        row["fraction"] == 0.0 and row["ci_high"] == 0.0
    ):  # not sampled: the whole set's rank leaves no k rows independent
        return row | {"proven": True}, (
            f"k = {k} is above every size the whole set's numerical rank allows, so no {k} "
            f"rows are independent (a proof); " + _sweep_evidence(sweep)
        )
    return (
        row,
        f"fraction {row['fraction']:.4f} at k = {k} (95% CI [{row['ci_low']:.4f}, {row['ci_high']:.4f}]); "
        + _sweep_evidence(sweep),
    )


def _ours_sweep(item: dict, col: dict) -> Ours:
    row, ev = _sweep_point(item, col)
    if row is None:
        return Ours(None, None, "", ev, None)
    thr = col["sweep"]["threshold"]
    verdict = "holds" if row["fraction"] >= thr else "fails"
    paper = "holds" if item["fraction"] >= thr else "fails"
    return Ours(
        verdict,
        row["fraction"],
        WHOLE_SET_ONLY if row.get("short") else "proven" if row.get("proven") else "",
        ev,
        None if row.get("short") else verdict == paper,
        (row["ci_low"], row["ci_high"]),
        item["k"],
    )


def band_of(fraction: float, bands: dict) -> str:
    """The name of the published band a fraction falls in, or ``between`` when none."""
    for name, (lo, hi) in bands.items():
        if lo <= fraction <= hi:
            return name
    return "between"


def _ours_shape(item: dict, col: dict, bands: dict) -> Ours:
    row, ev = _sweep_point(item, col)
    if row is None:
        return Ours(None, None, "", ev, None)
    label = band_of(row["fraction"], bands)
    lo, hi = bands[item["verdict"]]
    return Ours(
        label,
        row["fraction"],
        WHOLE_SET_ONLY if row.get("short") else f"band of '{item['verdict']}': {lo}-{hi}",
        ev,
        None if row.get("short") else label == item["verdict"],
        (row["ci_low"], row["ci_high"]),
        item["k"],
    )


def _ours_estimate(item: dict, col: dict) -> Ours:
    sweep = col.get("sweep")
    if sweep is None:
        return Ours(None, None, "", "no sweep was run for this column", None)
    n = col.get("n") or item["k"]
    est, T = sweep["summary"]["estimate"], sweep.get("T")
    verdict = "below n" if est < n else "at least n"
    if T is not None and n >= T:  # no estimate from T <= n rows reaches n, whatever the paper's data say
        why = f"n = {n} >= T = {T}: no estimate from {T} rows can reach n; " + _sweep_evidence(sweep)
        return Ours(verdict, float(est), WHOLE_SET_ONLY, why, None, k=n)
    return Ours(
        verdict, float(est), f"estimate {est}, n = {n}", _sweep_evidence(sweep), verdict == item["verdict"], k=n
    )


# --------------------------------------------------------------------------- the comparison


def compare(
    target: str, item: dict, col: dict | None, facts: RunFacts | None, spec: dict, threshold: float
) -> Comparison:
    """Hold ``item`` (a published item of ``spec``) against ``col``: our records of its column.

    ``col`` is ``{"records": {check: record}, "sweep": {...} | None, "n": n}`` or
    ``{"unavailable": reason}``; ``threshold`` is the paper's (sweep verdicts use it).
    """
    verdict, value, detail = paper_side(item, threshold)
    diffs = setting_differences(spec, item["model"], facts, item.get("column", "")) if facts is not None else []
    base = dict(
        target=target,
        model=item["model"],
        column=item.get("column", ""),
        kind=item["kind"],
        check=item.get("check"),
        k=item.get("k"),
        paper_verdict=verdict,
        paper_value=value,
        paper_detail=detail,
        source=item["source"],
        differences=tuple(d.text for d in diffs),
    )
    if col is None or col.get("unavailable"):
        reason = (col or {}).get("unavailable") or f"column {item.get('column')} was not run"
        return no_value(base, "unavailable", reason)
    kind = item["kind"]
    if kind == "shape":
        ours = _ours_shape(item, col, spec["bands"])
    else:
        ours = {"check": _ours_check, "ranks": _ours_ranks, "sweep": _ours_sweep, "estimate": _ours_estimate}[kind](
            item, col
        )
    if ours.agrees:
        status, reason = "match", ""
    else:
        status = "differs" if ours.agrees is False else "undetermined"
        reason = explain(ours, value, item, diffs, facts)
    return Comparison(
        **base,
        our_verdict=ours.verdict,
        our_value=ours.value,
        ci_low=ours.ci[0],
        ci_high=ours.ci[1],
        our_detail=ours.detail,
        status=status,
        reason=reason,
        our_k=ours.k,
    )


def explain(ours: Ours, paper_value: float | None, item: dict, diffs: list[Difference], facts: RunFacts | None) -> str:
    """Our evidence, whether the published number lies in our interval, and how this run's setting differs."""
    parts = [ours.evidence]
    lo, hi = ours.ci
    if paper_value is not None and lo is not None and hi is not None and lo <= paper_value <= hi:
        parts.append(
            f"the published {paper_value:g} lies inside our 95% interval [{lo:.4f}, {hi:.4f}], "
            "so the two estimates are within sampling error of each other"
        )
    if diffs:
        parts.append("this run differs from the paper's in " + ", ".join(d.label for d in diffs))
    elif facts is not None and item.get("column", "").startswith(("random", "embedding")):
        parts.append(
            f"same data, model and draws as the paper's; the random weights are another draw (seed {facts.seed}; "
            "the paper's were unseeded)"
        )
    return joined([p for p in parts if p], "; ")  # a Message: the command line names its flags in it


def setting_differences(spec: dict, key: str, facts: RunFacts, column: str = "") -> list[Difference]:
    """How one model's run differs from the paper's protocol, each difference stated from the run's facts."""
    protocol = spec["protocol"]
    paper_model = spec["models"][key]
    data = spec["data"]
    out = []

    def add(label: str, ours: str, paper: str) -> None:
        out.append(Difference(label, f"{ours} (the paper: {paper})", paper))

    if not facts.paper_data:
        add("data", f"data: {facts.data}", data["description"])
    elif data.get("snapshot") and data["snapshot"] not in facts.data:
        add("data snapshot", f"data: {facts.data}", f"the {data['snapshot']} snapshot")
    checkpoint = paper_model.get("checkpoint")
    if (facts.n, facts.d) != (paper_model.get("n"), paper_model.get("d")):
        add(
            f"model (n = {facts.n}, d = {facts.d})",
            f"model {facts.model}: n = {facts.n}, d = {facts.d}",
            f"{checkpoint}, n = {paper_model.get('n')}, d = {paper_model.get('d')}",
        )
    elif facts.model.lower() not in (paper_model.get("alias", ""), checkpoint):
        add(f"model ({facts.model})", f"model {facts.model}", checkpoint)
    source = facts.weights.get(column, "")
    if column.startswith("trained") and source and checkpoint not in source:
        add(f"trained weights ({source})", f"trained weights from {source}", checkpoint)
    if facts.T is not None and facts.T != data.get("T"):
        add(f"T ({facts.T})", f"T = {facts.T} examples", str(data.get("T")))
    if facts.samples != protocol["samples"]:
        add(f"draws ({facts.samples})", f"{facts.samples} draws per test", str(protocol["samples"]))
    if facts.threshold != protocol["threshold"]:
        add(f"threshold ({facts.threshold})", f"threshold {facts.threshold}", str(protocol["threshold"]))
    return out


def no_value(base: dict, status: str, reason: str) -> Comparison:
    """A comparison with no value of ours (``status``: unavailable or undetermined), and why."""
    return without_interval(base, None, None, "", status, reason)


def without_interval(
    base: dict, verdict: str | None, value: float | None, detail: str, status: str, reason: str
) -> Comparison:
    """A comparison whose value of ours has no interval (the memorisation checks)."""
    return Comparison(
        **base,
        our_verdict=verdict,
        our_value=value,
        ci_low=None,
        ci_high=None,
        our_detail=detail,
        status=status,
        reason=reason,
    )
