"""The public API documents itself: every exported function says what it returns and what it refuses.

``ruff`` (D101-D103, DOC501) holds every public function to a docstring and every exception a
function raises itself to its Raises section; this holds the front door (``mhaaudit.__all__``) to
more: a Returns section and a Raises section on each function, naming only real exception types,
so a library caller reads what comes back and what is refused (including what the functions it
calls refuse) without reading the code. Refusals it documents are tested here where they are new.
"""

from __future__ import annotations

import builtins
import inspect
import re

import pytest
import torch

import mhaaudit
from mhaaudit import errors

PUBLIC = [n for n in mhaaudit.__all__ if n != "__version__"]
FUNCTIONS = [n for n in PUBLIC if inspect.isfunction(getattr(mhaaudit, n))]


def _section(doc: str, title: str) -> str | None:
    """The body of a Google-style section ``title:`` (None when absent)."""
    m = re.search(rf"^{title}:\n((?:[ \t]+\S.*\n?|\n)+)", doc, re.MULTILINE)
    return m.group(1) if m else None


@pytest.mark.parametrize("name", PUBLIC)
def test_every_export_has_a_docstring(name):
    assert (inspect.getdoc(getattr(mhaaudit, name)) or "").strip(), name


def test_the_functions_are_the_api_not_a_handful():
    assert len(FUNCTIONS) >= 20  # the exports resolve to the functions themselves, decorators kept transparent


@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_public_function_says_what_it_returns_and_what_it_refuses(name):
    doc = inspect.getdoc(getattr(mhaaudit, name))
    returns, raises = _section(doc, "Returns"), _section(doc, "Raises")
    assert returns and returns.strip(), f"{name}: no Returns section"
    assert raises and raises.strip(), f"{name}: no Raises section"
    named = re.findall(r"^    (\w+):", raises, re.MULTILINE)
    assert named, f"{name}: the Raises section names no exception"
    for exc in named:
        cls = getattr(errors, exc, None) or getattr(builtins, exc, None)
        assert isinstance(cls, type) and issubclass(cls, BaseException), f"{name}: {exc} is not an exception type"


def test_draw_decisions_refuses_a_size_with_no_draw():
    X = torch.randn(5, 8, dtype=torch.float64)
    for k, says in ((0, "k must be at least 1"), (6, "k must be at most 5")):
        with pytest.raises(errors.InputError, match=says):
            mhaaudit.draw_decisions(X, k, samples=3)
    idx, independent = mhaaudit.draw_decisions(X, 3, samples=4)
    assert idx.shape == (4, 3) and independent.shape == (4,) and bool(independent.all())


def test_the_exact_rank_functions_refuse_non_finite_input_with_a_clear_error():
    rule = mhaaudit.RankRule.for_dtype(torch.float64)
    with pytest.raises(errors.InputError, match="NaN or infinite"):
        mhaaudit.assumption_2(torch.full((3, 4, 8), float("nan"), dtype=torch.float64))
    with pytest.raises(errors.InputError, match="NaN or infinite"):
        mhaaudit.context_ranks(torch.full((3, 4, 8), float("inf"), dtype=torch.float64), rule)
    with pytest.raises(errors.InputError, match="NaN or infinite"):
        mhaaudit.svd_rank(torch.full((3, 3), float("nan"), dtype=torch.float64), rule)
    with pytest.raises(errors.InputError, match=r"\(\.\.\., m, c\)"):
        mhaaudit.svd_rank(torch.ones(4, dtype=torch.float64), rule)
    rank, *_ = mhaaudit.svd_rank(torch.eye(3, dtype=torch.float64), rule)
    assert int(rank) == 3


def test_draw_critical_sizes_refuses_a_size_with_no_draw():
    from mhaaudit.kruskal.sweep import draw_critical_sizes

    X = torch.randn(5, 8, dtype=torch.float64)
    for K, says in ((0, "K must be at least 1"), (6, "K must be at most 5")):
        with pytest.raises(errors.InputError, match=says):
            draw_critical_sizes(X, K, samples=3)
    with pytest.raises(errors.InputError, match="samples must be at least 1"):
        draw_critical_sizes(X, 3, samples=0)
    orderings, kstar = draw_critical_sizes(X, 3, samples=4)
    assert orderings.shape == (4, 3) and kstar.shape == (4,)
