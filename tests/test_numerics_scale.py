"""Exact power-of-two rescaling, and the issue it fixes end to end (a false proof at 1e155)."""

from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest
import torch
from conftest import devices

from mhaaudit.numerics import RankRule, exponent_of, ldexp, numerics, row_norms, scaled, subnormals_kept


def test_exponent_of_brings_the_largest_entry_into_half_open_unit_interval():
    for m in (1.0, 0.75, 3.0, 1e300, 1e-300, 5e-324, 1.7e308):
        e = exponent_of(torch.tensor([m, -m / 3, 0.0], dtype=torch.float64))
        assert 0.5 <= math.ldexp(m, -e) < 1.0
    assert exponent_of(torch.zeros(3, 4)) == 0
    per_row = exponent_of(torch.tensor([[1.0, -3.0], [0.0, 0.0], [0.25, 0.1]], dtype=torch.float64), dims=-1)
    assert per_row.tolist() == [2, 0, -1]


@pytest.mark.parametrize("e", [-1100, -1074, -1023, -600, -1, 0, 1, 600, 1023, 1074, 1100])
def test_ldexp_is_exact_beyond_the_exponent_range(e):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, generator=g, dtype=torch.float64)
    x = x * 2.0 ** -(e // 2 + 60) if e > 0 else x * 2.0 ** (-e // 2 - 60)  # keep results normal
    y = ldexp(x, e)
    assert torch.equal(ldexp(y, -e), x)
    assert torch.equal(ldexp(x, torch.full((50,), e)), y)  # tensor exponents give the same
    assert ldexp(float(x[0]), e) == float(y[0])
    assert ldexp(1.0, 2000) == math.inf and ldexp(-1.0, 2000) == -math.inf
    for z, dev in ((x.clone().to(d), d) for d in devices()):  # in place, by tensor exponents: the same bits
        assert ldexp(z, torch.full((50,), e, device=dev), inplace=True) is z and torch.equal(z.cpu(), y)
        assert exponent_of(z[None], dims=1).tolist() == [exponent_of(y)]  # per slice, on the device too


def test_scaled_divides_by_a_power_of_two_and_rescales_the_absolute_tolerance():
    X = torch.tensor([[3.0, -1e300], [0.0, 2.0]], dtype=torch.float64)
    unit = scaled(X, RankRule.for_dtype(torch.float64, atol=1e290))
    assert 0.5 <= float(unit.X.abs().max()) < 1.0
    assert torch.equal(unit.to_data(unit.X), X)
    assert unit.rule.atol == ldexp(1e290, -unit.exponent) and unit.rule.rtol == 0.0
    assert scaled(X, RankRule.for_dtype(torch.float64)).rule.atol is None  # relative rule: unchanged


def test_only_atol_stays_only_atol_when_the_rescaled_atol_underflows():
    rule = RankRule.for_dtype(torch.float64, atol=1e-300).in_units(1000)
    assert rule.atol == 0.0 and rule.rtol_for(5, 7) == 0.0


@pytest.mark.parametrize("scale, atol", [(1e-300, 1e10), (1e-315, 1e-3)])
def test_an_absolute_tolerance_that_overflows_in_the_units_is_reported_as_given(scale, atol):
    """Data so small that the absolute tolerance divided by their power of two overflows (to infinity, where every
    singular value is below it, as below ``atol`` itself): the ranks are the rule's (0), and every tolerance
    reported is ``atol``, not infinity: a witness's, a context matrix's (so that Assumption 2 is decided under the
    rule, not left unavailable), and a memorisation certificate's."""
    from mhaaudit.capacity import certify_head_prefixes
    from mhaaudit.contexts import assumption_2, context_ranks
    from mhaaudit.kruskal import subset_test

    rule = RankRule.for_dtype(torch.float64, atol=atol)
    g = torch.Generator().manual_seed(0)
    E = torch.randn(2, 2, 3, generator=g, dtype=torch.float64)
    E[1] *= scale
    with subnormals_kept():  # (a subnormal reference too)
        want = [int(torch.linalg.matrix_rank(E[b], atol=atol, rtol=0)) for b in range(2)]
    rank, _, _, tol = context_ranks(E, rule)
    assert rank.tolist() == want and want[1] == 0 and tol[1] == atol
    result = assumption_2(E, rule)
    assert (result.verdict, result.full, result.deficient) == ("fails", want.count(2), want.count(0) + want.count(1))
    X = torch.randn(6, 3, generator=g, dtype=torch.float64) * scale
    test = subset_test(X, 2, samples=20, rule=rule, device="cpu")
    assert test.verdict == "fails" and test.witness is not None and test.witness.tol == atol
    (cert,) = certify_head_prefixes(X, 3, [1], rule=rule)
    assert cert.rank == 0 and cert.tolerance == atol


def test_subnormal_data_are_rescaled_exactly_even_inside_numerics():
    X = torch.tensor([[3e-310, -1e-315], [5e-324, 0.0]], dtype=torch.float64)
    X32 = torch.tensor([[1e-40, 3e-39]], dtype=torch.float32)
    with numerics():
        unit, unit32 = scaled(X, RankRule()), scaled(X32, RankRule())
    with subnormals_kept():  # outside numerics: a no-op
        pass
    assert torch.equal(ldexp(unit.X, unit.exponent), X) and int((unit.X != 0).sum()) == 3
    assert torch.equal(ldexp(unit32.X, unit32.exponent), X32.double())


@pytest.mark.parametrize("scale", [1e-200, 1e-160, 1.0, 1e160, 1e200])
def test_row_norms_neither_overflow_nor_underflow(scale):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(6, 40, generator=g, dtype=torch.float64)
    X[3] = 0.0
    ref = X.norm(dim=1)
    assert torch.allclose(row_norms(X * scale) / scale, ref, rtol=1e-13)


@pytest.mark.parametrize("scale", [1.0, 1e155, 1e160, 1e200, 1e300, 1e-300, 1e-310])
def test_kruskal_command_reports_what_matrix_rank_says_at_any_scale(tmp_path, scale):
    from mhaaudit.cli.app import main

    X = np.random.default_rng(0).standard_normal((100, 32)) * scale
    np.save(tmp_path / "X.npy", X)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(["kruskal", str(tmp_path / "X.npy"), "--k", "5", "--format", "json", "--samples", "300"])
        except SystemExit as exc:
            assert exc.code in (0, None)
    doc = json.loads(out.getvalue())
    rank = int(torch.linalg.matrix_rank(torch.from_numpy(X)))
    assert rank == 32 and doc["meta"]["set_rank"] == rank
    (rec,) = doc["records"]
    assert rec["verdict"] == "holds" and rec["sampled"] and rec["satisfied"] == 300 and not rec["witness"]


def test_ldexp_by_one_product_is_the_two_halves_wherever_the_result_is_normal():
    """Where 2**e is a normal float64 a tensor is multiplied once: the same bits as the two halves
    wherever the result is a normal number."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4000, dtype=torch.float64, generator=g) * torch.exp2(
        torch.randint(-300, 300, (4000,), generator=g).double()
    )
    for e in [*range(-1022, 1024, 31), -1022, 1023]:
        h = e // 2
        two = x * math.ldexp(1.0, h) * math.ldexp(1.0, e - h)
        normal = (two.abs() >= 2.0**-1022) & torch.isfinite(two)
        assert torch.equal(ldexp(x, e)[normal], two[normal]), e


_POOL_STARTED_WHILE_FLUSHING = """
import numpy as np, torch
from mhaaudit.kruskal.sampling import as_matrix, rows_of
from mhaaudit.numerics import RankRule, numerics, scaled, to_float64
from mhaaudit.numerics.stream import unit_of
X = torch.from_numpy((np.random.default_rng(0).standard_normal((400, 200)) * 1e-41).astype(np.float32))
with numerics():  # the first parallel kernels of this process run here, while subnormals are flushed
    as_matrix(X)
    torch.isfinite(torch.ones(400, 200)).all()
    unit, _ = unit_of(rows_of(X), RankRule.for_dtype(X.dtype))
    zero_rows = [int((t == 0).all(1).sum()) for t in (unit.materialize(), unit.rows(list(range(400))),
                 scaled(X, RankRule()).X, to_float64(X))]
print(zero_rows)
"""


def test_subnormal_rows_survive_worker_threads_started_while_flushing():
    """A worker thread of torch's CPU pool keeps the flushing mode of the thread that started it, so
    a conversion split across the pool read half the rows of subnormal float32 features as zeros
    (seen at 2000 x 768): every conversion and rescaling of rows runs in the calling thread."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "4"}
    out = subprocess.run(
        [sys.executable, "-c", _POOL_STARTED_WHILE_FLUSHING], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "[0, 0, 0, 0]", out.stdout + out.stderr


def _small_beside_large() -> dict[str, np.ndarray]:
    """Sets with a non-zero row far smaller than the largest: 1e-10 beside 1e300 (no subnormal entry in it,
    but one once divided by the set's power of two), and a subnormal row (1e-310) beside rows of 1."""
    return {
        "range": np.array([[1e300, 0.0], [0.0, 1e300], [1e-10, 0.0]]),
        "subnormal": np.array([[1.0, 0.0], [0.0, 1.0], [1e-310, 0.0]]),
    }


@pytest.mark.parametrize("name", ["range", "subnormal"])
def test_a_row_too_small_beside_the_largest_is_refused_not_proven_zero(tmp_path, name):
    """Divided by the set's power of two, row 2 fell below float64's normal range and was flushed: the
    Kruskal rank was "proven" 0 by a "zero row" that is not zero (every single row has rank 1)."""
    from mhaaudit.errors import InputError
    from mhaaudit.kruskal import babel_floor, kruskal_sweep, subset_test
    from mhaaudit.numerics.stream import ROW_RANGE_BITS

    X = _small_beside_large()[name]
    assert all(int(np.linalg.matrix_rank(X[[i]])) == 1 for i in range(3))
    for run in (
        lambda: subset_test(X, 2, samples=50),
        lambda: kruskal_sweep(X, samples=50),
        lambda: babel_floor(torch.from_numpy(X), RankRule()),
    ):
        with pytest.raises(InputError, match=rf"row 2 of the features is not zero .* 2\^-{ROW_RANGE_BITS} of the"):
            run()
    np.save(tmp_path / "X.npy", X)
    from clitools import assert_one_error

    from mhaaudit.cli.app import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as out:
        rc = main(["kruskal", str(tmp_path / "X.npy"), "--format", "json"])
    assert_one_error(rc, err.getvalue(), f"largest entry ({X[2, 0]:.3g})")
    assert out.getvalue() == ""


def test_rows_within_the_range_are_decided_as_matrix_rank_decides_them():
    """Rows down to 2^-950 of the largest entry are kept, and every subset is decided as exactly as alone:
    two tiny independent rows count as independent, a tiny row beside a large one does not."""
    from mhaaudit.kruskal import exact_kruskal_rank, kruskal_sweep

    tiny = 2.0**-950
    X = np.array([[1.0, 0.0], [0.0, 1.0], [tiny, 0.0], [0.0, tiny]])
    sweep = kruskal_sweep(X, samples=400, seed=0)
    # the pairs {0, 1} and {2, 3} have rank 2 under the rule (each on its own sigma_max); the four others 1
    assert sweep.fractions[0] == 1.0 and 0.2 < sweep.fractions[1] < 0.47
    assert exact_kruskal_rank(X) == 1 and sweep.ceiling.value == 1


@pytest.mark.parametrize("small", [1e-10, 1e-310])
def test_a_context_matrix_far_smaller_than_its_batch_is_decided_as_alone(small):
    """Assumption 2 divided a batch by one power of two: a matrix of 1e-10 beside one of 1e300 (or of
    subnormal entries beside one of 1) was flushed to rank 0. Each is now decided on its own scale."""
    from mhaaudit.contexts import assumption_2, context_ranks

    g = torch.Generator().manual_seed(0)
    E = torch.randn(3, 3, 5, dtype=torch.float64, generator=g)
    E[0] *= 1e300 if small == 1e-10 else 1.0
    E[1] *= small
    E[2] = E[1]
    E[2, 2] = E[2, 0]  # a dependent one of the same size
    rule = RankRule.for_dtype(torch.float64)
    rank, smin, smax, _tol = context_ranks(E, rule)
    alone = [context_ranks(E[i : i + 1], rule) for i in range(3)]
    assert rank.tolist() == [3, 3, 2] == [int(a[0]) for a in alone]
    assert rank.tolist() == [int(torch.linalg.matrix_rank(E[i] / small if i else E[i])) for i in range(3)]
    assert torch.allclose(smax[1:], torch.cat([a[2] for a in alone[1:]]), rtol=1e-12, atol=0) and float(smin[1]) > 0
    result = assumption_2(E)
    assert result.full == 2 and result.deficient_examples == (2,)


def test_an_absolute_tolerance_that_underflows_in_the_units_is_reported_as_given():
    """Data so large that the absolute tolerance divided by their power of two underflows to 0, where every nonzero
    singular value is above it, as above ``atol`` itself: the ranks are the rule's, and the tolerance reported is
    ``atol``, not 0. Before, a context matrix's was 0, so Assumption 2 of tokens reduced under the rule was left
    "unavailable" as decided under another rule."""
    from mhaaudit import check_features, reduce_tokens
    from mhaaudit.contexts import assumption_2, context_ranks
    from mhaaudit.numerics import svd_rank

    rule = RankRule(atol=1e-300)
    E = torch.tensor(np.random.default_rng(0).standard_normal((2, 4, 4)) * 1e30)
    rank, _, _, tol = context_ranks(E, rule)
    assert rank.tolist() == [4, 4] and tol.tolist() == [1e-300, 1e-300]
    assert svd_rank(E, rule)[3].tolist() == [1e-300, 1e-300]
    assert assumption_2(E, rule).verdict == "holds"
    fs = reduce_tokens(E, 0, rule=rule)
    assert check_features(fs, samples=20, atol=1e-300)[0]["assumption_2"].verdict == "holds"


def test_rank_functions_refuse_what_is_not_a_rule_and_take_no_matrices():
    """A rule that is not a RankRule is one InputError naming ``rule`` (it was an AttributeError), a batch size past
    64 bits one naming ``batch_size`` (a ValueError from torch), and an empty batch of matrices has empty ranks
    (a RuntimeError)."""
    from mhaaudit import reduce_tokens
    from mhaaudit.contexts import assumption_2, context_ranks
    from mhaaudit.errors import InputError
    from mhaaudit.numerics import svd_rank

    E = torch.randn(2, 3, 5)
    for call in (
        lambda: assumption_2(E, rule="x"),
        lambda: reduce_tokens(E, 0, rule="x"),
        lambda: context_ranks(E, None),
        lambda: svd_rank(torch.eye(3), None),
    ):
        with pytest.raises(InputError, match="rule"):
            call()
    for call in (lambda: reduce_tokens(E, 0, batch_size=10**20), lambda: assumption_2(E, batch_size=10**20)):
        with pytest.raises(InputError, match="batch_size"):
            call()
    rank, smin, _, tol, s = svd_rank(torch.zeros(0, 3, 3), RankRule())
    assert rank.shape == smin.shape == tol.shape == (0,) and s.shape == (0, 3)
