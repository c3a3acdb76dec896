"""Every argument check: integers, lists, ranges, choices, fractions, tolerances, layers."""

from __future__ import annotations

import pytest

from mhaaudit import validate
from mhaaudit.errors import InputError


def test_integer():
    assert validate.integer("--n", 3) == 3 and validate.integer("--n", "4") == 4 and validate.integer("--n", 5.0) == 5
    assert validate.integer("--seed", 0, minimum=0) == 0
    for bad, match in ((0, "at least 1"), (2.5, "integer"), (True, "integer"), ("x", "integer"), (None, "integer")):
        with pytest.raises(InputError, match=match):
            validate.integer("--n", bad)
    with pytest.raises(InputError, match="at most 3"):
        validate.integer("--n", 4, maximum=3)


def test_integers_are_ascii_digits():
    """int() reads other scripts' digits; the command line's typer options refuse them, and so do these."""
    assert validate.integer("--n", " 1_000 ") == 1000 and validate.int_ranges("+1-3", "--x") == [1, 2, 3]
    for bad in ("\u0662\u0660", "\uff12\uff10", "\u0967"):
        with pytest.raises(InputError, match="integer"):
            validate.integer("--n", bad)
        with pytest.raises(InputError, match="comma-separated"):
            validate.int_list("--values", f"1,{bad}")
        for spec in (bad, f"1-{bad}", f"{bad}-30"):
            with pytest.raises(InputError, match="ranges"):
                validate.int_ranges(spec, "--x")


def test_int_list_keeps_order_and_drops_repeats():
    assert validate.int_list("--values", "4, 1,4 2") == (4, 1, 2)
    assert validate.int_list("--values", [3, 3.0]) == (3,) and validate.int_list("--values", None) == ()
    with pytest.raises(InputError, match="comma-separated"):
        validate.int_list("--values", "1,a")
    with pytest.raises(InputError, match="at least 1"):
        validate.int_list("--values", "0")


def test_int_ranges():
    assert validate.int_ranges("0-2,6", "--layers") == [0, 1, 2, 6]
    assert validate.int_ranges([3, 1], "--x") == [1, 3] and validate.int_ranges(5, "--x") == [5]
    for bad, match in (("5-3", "empty"), ("a", "ranges"), ("", "names no"), (True, "must name")):
        with pytest.raises(InputError, match=match):
            validate.int_ranges(bad, "--x")


def test_layers():
    assert validate.layers("0-3") == [0, 1, 2, 3] and validate.layers(None) is None
    with pytest.raises(InputError, match="start at 0"):
        validate.layers("-1")
    with pytest.raises(InputError, match="names no"):
        validate.layers(",")


def test_choice_split_fraction_tolerance():
    assert validate.choice("--task", " Regression ", ("classification", "regression")) == "regression"
    assert validate.choice("--vary", "h", ("heads", "n"), aliases={"h": "heads"}) == "heads"
    with pytest.raises(InputError, match="choose from"):
        validate.choice("--task", "x", ("a", "b"))
    assert validate.split_list(["a,b", "c", "a"]) == ["a", "b", "c"] and validate.split_list([]) is None
    assert validate.fraction("--threshold", 1) == 1.0
    for bad in (0, 1.01, "x"):
        with pytest.raises(InputError):
            validate.fraction("--threshold", bad)
    assert validate.tolerance("--rtol", None) is None and validate.tolerance("--rtol", 0) == 0.0
    for bad in (-1, float("inf"), "x"):
        with pytest.raises(InputError):
            validate.tolerance("--rtol", bad)


# --------------------------------------------------------------------------------------------
# --heads parsing
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec,want",
    [
        ("1-12", list(range(1, 13))),
        ("3", [3]),
        ("1,2,4", [1, 2, 4]),
        ("4,1-2", [1, 2, 4]),
        (" 2 , 2 ", [2]),
        ([3, 1], [1, 3]),
        (5, [5]),
    ],
)
def test_parse_heads(spec, want):
    assert validate.head_counts(spec, 12) == want


def test_an_empty_range_is_answered_with_a_range():
    """An empty range (``8-2``) is answered with an example of low-high, the first range among the examples, not
    the first example (``--heads 8-2`` of memorize said "e.g. 4")."""
    with pytest.raises(InputError, match=r"the range 8-2 is empty \(use low-high, e\.g\. 1-8\)$"):
        validate.int_ranges("8-2", "--heads", what="values", example="4, 1-8 or 1,2,4,8", minimum=1)
    with pytest.raises(InputError, match=r"the range 5-0 is empty \(use low-high, e\.g\. 0-6\)$"):
        validate.int_ranges("5-0", "--layers", what="layers")


def test_parse_heads_none_means_all():
    assert validate.head_counts(None, 12) is None


@pytest.mark.parametrize(
    "spec,match",
    [
        ("", "names no head"),
        (" , ", "names no head"),
        ("0", "start at 1"),
        ("0-3", "start at 1"),
        ("-2", "head counts"),
        ("5-3", r"the range 5-3 is empty \(use low-high, e\.g\. 1-12\)$"),  # not "e.g. 1-12,)"
        ("a", "head counts"),
        ("13", "at most 12"),
        ("1-13", "at most 12"),
        (True, "head counts"),
    ],
)
def test_parse_heads_errors(spec, match):
    with pytest.raises(InputError, match=match):
        validate.head_counts(spec, 12)


def test_int_ranges_refuses_a_value_named_twice_in_any_form_when_asked():
    from mhaaudit.errors import InputError, Param
    from mhaaudit.validate import int_ranges

    for spec in ("0,0", "0-2,1", [3, 3], (v for v in (1, 2, 1))):
        with pytest.raises(InputError, match=r"seed \d is named twice; name each seed once"):
            int_ranges(spec, Param("seeds"), once="seed")
    assert int_ranges("0-2,1", Param("layers")) == [0, 1, 2]  # without ``once``, a value counts once
