"""The paper's published values, shipped with the package as data (``published.json``).

Each target (``table1``, ``table3``, ``figure1``, ``figure2``) names its source (table, figure,
notebook), the data and models the paper used, and a list of *items*: one published finding each,
with the verdict the paper reports and, where the paper or its notebooks print one, the number
behind it. Item kinds:

``check``     a check's verdict in one column (``k``, ``fraction``, ``counts``, ``satisfied`` of ``T``)
``ranks``     the range of ranks the paper saw among its draws of k = d queries
``sweep``     the satisfied fraction at one subset size k of a Kruskal-rank sweep
``shape``     the level of Figure 1's curve at one k (``about 1``, ``about 0.5``, ``about 0``)
``estimate``  a Kruskal-rank estimate (the largest k whose fraction reaches the threshold)
``linear``, ``monotone``, ``theorem1``   Figure 2's claims about memorisation against H

Values marked in their ``source`` or ``note`` as read off a chart or reconstructed are not
printed numbers: the file says so item by item.
"""

from __future__ import annotations

import copy
import functools
import json
from importlib import resources

from .. import validate
from ..defaults import REPRODUCE_TARGETS as TARGETS

KINDS = ("check", "ranks", "sweep", "shape", "estimate", "linear", "monotone", "theorem1")

# What every item of a kind must carry besides model, kind, source.
_REQUIRED = {
    "check": ("column", "check", "k", "verdict"),
    "ranks": ("column", "check", "k", "ranks"),
    "sweep": ("column", "k", "fraction"),
    "shape": ("column", "k", "verdict"),
    "estimate": ("column", "k", "value", "verdict"),
    "linear": ("verdict", "min_r2"),
    "monotone": ("verdict",),
    "theorem1": ("verdict", "formula"),
}


@functools.lru_cache(maxsize=1)
def _load() -> dict:
    text = resources.files(__package__).joinpath("published.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    problems = missing_fields(doc)
    if problems:  # a broken package, not a user error
        raise RuntimeError("published.json is incomplete: " + "; ".join(problems[:5]))
    return doc


def published() -> dict:
    """The whole published document (a copy: callers may not change the package's data)."""
    return copy.deepcopy(_load())


def target_spec(target: str) -> dict:
    """One target's published document: title, source, data, models, items (``values``), and the
    paper's Monte-Carlo ``protocol`` (draws, threshold, rank rule)."""
    doc = _load()
    spec = copy.deepcopy(doc["targets"][validate.choice("target", target, TARGETS)])
    return spec | {"protocol": copy.deepcopy(doc["protocol"])}


def missing_fields(doc: dict) -> list[str]:
    """What a published document lacks (an empty list when it is complete)."""
    out = []
    for key in ("paper", "protocol", "targets"):
        if key not in doc:
            out.append(f"no {key!r}")
    for field in ("samples", "threshold", "rank_rule"):
        if field not in doc.get("protocol", {}):
            out.append(f"protocol has no {field!r}")
    targets = doc.get("targets", {})
    for t in TARGETS:
        spec = targets.get(t)
        if spec is None:
            out.append(f"no target {t!r}")
            continue
        for field in ("title", "source", "data", "models", "values"):
            if field not in spec:
                out.append(f"{t}: no {field!r}")
        for i, item in enumerate(spec.get("values", [])):
            kind = item.get("kind")
            if kind not in KINDS:
                out.append(f"{t} item {i}: unknown kind {kind!r}")
                continue
            for field in ("model", "source", *_REQUIRED[kind]):
                if field not in item:
                    out.append(f"{t} item {i} ({kind}): no {field!r}")
            if item.get("model") not in spec.get("models", {}):
                out.append(f"{t} item {i}: model {item.get('model')!r} is not among the target's models")
    return out
