"""LAPACK results are checked before they decide anything (``mhaaudit.numerics.checked``).

A route that returns values no matrix with these entries can have (not finite, negative, out of
order, beyond the Frobenius norm, whose squares miss it), or that raises or reports an error, is
never used: the matrix is recomputed by the next route, one line on stderr says so with the
call's size, and the decision is the one ``torch.linalg.matrix_rank`` makes. The degenerate inputs
(equal rows, a zero row, rows differing only below the tolerance, subnormal, huge and mixed-scale
entries) run through ``subset_test``, ``estimate_kruskal_rank`` and ``kruskal --format json``.
"""

from __future__ import annotations

import contextlib
import json
import math

import numpy as np
import pytest
import torch
from clitools import run
from matrices import gen

import mhaaudit
from mhaaudit.kruskal import subset_test
from mhaaudit.numerics import RankRule, certificates, checked, decide_full_rank, gram_rank, svd_rank
from mhaaudit.numerics.checked import NumericalFailure, usable_eigenvalues, usable_singular_values
from mhaaudit.numerics.rule import numerics
from mhaaudit.numerics.threads import intra_op_threads


def _x(m=6, c=9, seed=0):
    return torch.randn(m, c, generator=gen(seed), dtype=torch.float64) / 4


def _spoiled(kind: str, s: torch.Tensor) -> torch.Tensor:
    s = s.clone()
    if kind == "nan":
        s[..., 1] = float("nan")
    elif kind == "negative":
        s[..., -1] = -s[..., -1] - 1e-3
    elif kind == "unsorted":
        s = s.flip(-1)
    elif kind == "too large":
        s[..., 0] = s[..., 0] * 10
    elif kind == "too small":
        s = s * 1e-3
    elif kind == "wrong sum":
        s[..., 1:] = s[..., 1:] * 0.5
    return s


KINDS = ["nan", "negative", "unsorted", "too large", "too small", "wrong sum"]


@pytest.mark.parametrize("kind", KINDS)
def test_unusable_singular_values_are_recognised(kind):
    x = _x()
    s = torch.linalg.svdvals(x)
    assert usable_singular_values(x, s)[0].all()
    ok, why = usable_singular_values(x, _spoiled(kind, s))
    assert not ok.any() and why[0]


def test_degenerate_matrices_pass_the_checks():
    for x in (torch.zeros(4, 7, dtype=torch.float64), torch.ones(30, 7, dtype=torch.float64) / 2, _x(1, 5)):
        assert usable_singular_values(x, torch.linalg.svdvals(x))[0].all()
        G = x @ x.T
        assert usable_eigenvalues(G, torch.linalg.eigvalsh(G))[0].all()


@pytest.mark.parametrize("kind", ["nan", "unsorted", "too large", "wrong sum"])
def test_unusable_eigenvalues_are_recognised(kind):
    x = _x()
    G = x @ x.T
    lam = torch.linalg.eigvalsh(G)
    assert usable_eigenvalues(G, lam)[0].all()
    spoiled = _spoiled(kind, lam.flip(-1)).flip(-1)
    assert not usable_eigenvalues(G, spoiled)[0].any()


@pytest.mark.parametrize("kind", [*KINDS, "raises"])
def test_a_failed_svd_is_recomputed_and_said_once(monkeypatch, capsys, kind):
    x = torch.stack([_x(seed=1), _x(seed=2), _x(seed=3)])
    ref = torch.linalg.svdvals(x)
    real = torch.linalg.svdvals

    def bad(a):
        if kind == "raises":
            raise RuntimeError("linalg.svd: The algorithm failed to converge")
        out = real(a)
        out[1] = _spoiled(kind, out[1])  # the second matrix of the batch comes back spoiled
        return out

    monkeypatch.setattr(torch.linalg, "svdvals", bad)
    before = checked.recomputations().get("gesdd", 0)
    for _ in range(2):
        s = checked.svdvals(x)
        assert torch.allclose(s, ref, rtol=1e-12, atol=1e-15)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "6 x 9" in err[0] and "gesdd" in err[0] and "gesvd" in err[0], err
    assert checked.recomputations()["gesdd"] == before + (6 if kind == "raises" else 2)


def test_every_route_failing_is_a_numerical_failure(monkeypatch, capsys):
    monkeypatch.setattr(torch.linalg, "svdvals", lambda a: torch.full((*a.shape[:-2], min(a.shape[-2:])), np.nan))
    monkeypatch.setattr(checked, "_scipy_gesvd", lambda a: np.full(min(a.shape), np.nan))
    monkeypatch.setattr(
        checked, "_SVD_ROUTES", (checked._SVD_ROUTES[0], ("gesvd", checked._each(checked._scipy_gesvd)))
    )
    with pytest.raises(NumericalFailure, match="5 x 8"):
        checked.svdvals(_x(5, 8))
    assert "no route left" in capsys.readouterr().err


def test_svd_rank_is_matrix_rank_when_gesdd_returns_garbage(monkeypatch, capsys):
    """MKL reports an illegal parameter (DLASCL) by printing and leaves garbage: the decision stands."""
    rule = RankRule.for_dtype(torch.float32)
    X = torch.cat([_x(8, 20, 4), _x(8, 20, 4)[:3] * 0.5])  # rank 8 of 11 rows
    ref = [int(torch.linalg.matrix_rank(X[: i + 2], rtol=rule.rtol_for(i + 2, 20))) for i in range(10)]
    real = torch.linalg.svdvals
    monkeypatch.setattr(torch.linalg, "svdvals", lambda a: real(a).flip(-1))  # out of order, as a failed call
    got = [int(svd_rank(X[: i + 2], rule)[0]) for i in range(10)]
    assert got == ref
    assert "out of order" in capsys.readouterr().err


def test_eigenvalues_no_routine_gives_go_to_the_svd(monkeypatch, capsys):
    """Gram eigenvalues that no route makes usable leave the decision to the SVD: the same decisions."""
    rule = RankRule.for_dtype(torch.float32)
    X = torch.randn(40, 12, generator=gen(5), dtype=torch.float64)
    X[30:] = X[:10] * 2  # repeated directions: dependent draws
    idx = torch.stack([torch.randperm(40, generator=gen(i))[:6] for i in range(64)])
    rows = X[idx]
    G = rows @ rows.transpose(-1, -2)
    ref_full = decide_full_rank(G.clone(), lambda j: rows[j], 6, 12, rule).full
    ref_rank = gram_rank(G.clone(), lambda j: rows[j], 12, rule)
    nan = lambda a: torch.full(a.shape[:-1], float("nan"), dtype=torch.float64)  # noqa: E731
    monkeypatch.setattr(checked, "_EIG_ROUTES", tuple((n, nan) for n, _ in checked._EIG_ROUTES))
    assert torch.equal(gram_rank(G.clone(), lambda j: rows[j], 12, rule), ref_rank)
    assert torch.equal(decide_full_rank(G.clone(), lambda j: rows[j], 6, 12, rule).full, ref_full)
    assert "left to the SVD" in capsys.readouterr().err


# --------------------------------------------------------------------------- degenerate inputs


def _cases(T: int, d: int, dtype, seed: int = 0) -> dict[str, torch.Tensor]:
    """The degenerate sets in ``dtype``: subnormal, huge and mixed-scale entries at the ends of its range."""
    rng = np.random.default_rng(seed)
    eps, tiny, big = (float(np.finfo(dtype).eps), float(np.finfo(dtype).tiny), float(np.finfo(dtype).max))
    v = rng.standard_normal(d).astype(dtype)
    generic = rng.standard_normal((T, d))
    zero = generic.copy()
    zero[T // 3] = 0
    # rows a few units in the last place apart: far below the tolerance max(rows, cols) * eps
    near = np.tile(v, (T, 1)) * (1 + eps * rng.integers(-2, 3, (T, d))).astype(dtype)
    mixed = generic.copy()
    # float32's ends; float64 keeps its rows within 2^940 of each other (wider is refused: ROW_RANGE_BITS)
    lo, hi = (tiny**0.5, big**0.5 / 8) if dtype == np.float32 else (2.0**-470, 2.0**470)
    mixed[: T // 2] *= lo
    mixed[T // 2 :] *= hi
    unit = generic / np.abs(generic).max()
    out = {
        "ones": np.ones((T, d)),
        "equal": np.tile(v, (T, 1)),
        "zero row": zero,
        "below tolerance": near,
        "subnormal": unit * tiny * 2.0**-8,
        "huge": unit * big / 2,
        "mixed scale": mixed,
        "generic": generic,
    }
    return {name: torch.from_numpy(np.asarray(A, dtype=dtype)) for name, A in out.items()}


def _proves(w, X: torch.Tensor) -> bool:
    """The witness's rows are dependent under the rule, by matrix_rank on them in float64."""
    S = X[list(w.indices)].double()
    scale = S.abs().max()
    if scale == 0:
        return True
    S = S / scale  # matrix_rank squares nothing, but its tolerance must not underflow
    rule = RankRule.for_dtype(X.dtype)
    return int(torch.linalg.matrix_rank(S, rtol=rule.rtol_for(*S.shape))) < S.shape[0]


def _check_degenerate(name: str, X: torch.Tensor, k: int, samples: int):
    r = subset_test(X, k, samples=samples, seed=1)
    if name in ("ones", "equal", "below tolerance", "zero row"):  # (one zero row among many: the estimate may hold)
        assert r.exact_status == "fails" and r.witness is not None, (name, r.reason)
        assert len(r.witness.indices) <= 2 and (r.verdict == "fails" or name == "zero row")
        if name == "zero row":
            assert len(r.witness.indices) == 1 and r.witness.singular_values == (0.0,)
    if r.witness is not None:
        assert _proves(r.witness, X), name
        assert all(np.isfinite(r.witness.singular_values)) and r.witness.tol >= 0
    if name in ("generic", "subnormal", "huge"):  # the same decisions at any scale
        assert r.verdict == "holds" and r.witness is None, name
    return r


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_degenerate_sets_small(dtype, capsys):
    for name, X in _cases(120, 24, dtype).items():
        _check_degenerate(name, X, 5, 300)
    assert "Traceback" not in capsys.readouterr().err


def test_rows_at_both_ends_of_float64_are_refused():
    """Rows of sqrt(tiny) beside rows of sqrt(max) / 8: divided by the set's power of two, the small ones
    fall below float64's normal range and would be flushed, so the set is refused in one line."""
    from mhaaudit.errors import InputError

    X = torch.from_numpy(np.random.default_rng(0).standard_normal((40, 8)))
    X[:20] *= float(np.finfo(np.float64).tiny) ** 0.5
    X[20:] *= float(np.finfo(np.float64).max) ** 0.5 / 8
    with pytest.raises(InputError, match="row 0 of the features is not zero"):
        subset_test(X, 5, samples=50)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_degenerate_sets_through_the_cli_json(dtype, capsys, tmp_path):
    for name, X in _cases(150, 32, dtype).items():
        path = tmp_path / f"{name.replace(' ', '_')}.npy"
        np.save(path, X.numpy())
        rc, out, err = run(capsys, "kruskal", path, "--k", "5", "--samples", "200", "--format", "json")
        assert rc == 0, err
        doc = json.loads(out)
        (rec,) = doc["records"]
        if name in ("ones", "equal", "zero row", "below tolerance"):
            assert rec["exact_status"] == "fails" and 1 <= len(rec["witness"]) <= 2, (name, rec["reason"])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_degenerate_sets_at_2000_by_768(dtype, capsys, tmp_path):
    """The reported size: T = 2000 rows of d = 768, each case through subset_test and estimate_kruskal_rank."""
    for name, X in _cases(2000, 768, dtype).items():
        _check_degenerate(name, X, 5, 500)
        path = tmp_path / "x.npy"
        np.save(path, X.numpy())
        res = mhaaudit.estimate_kruskal_rank(path, k=[5, 197], samples=500)
        for t in res.tests:
            if t.witness is not None:
                assert _proves(t.witness, X), name
    assert "Traceback" not in capsys.readouterr().err


# --------------------------------------------------------------------------- no route left: undecided, not exit 3


def _no_route_for(monkeypatch, poisoned):
    """Every SVD route fails for the matrices ``poisoned`` picks (a predicate on a float64 matrix), and works for
    the others; and every decision goes to the SVD (no certificate, no eigenvalue settles it)."""
    from mhaaudit.numerics import certificates, lapack

    real = torch.linalg.svdvals
    monkeypatch.setattr(checked, "_SAID", set())  # each line is said once a process: say them again here

    def torch_route(a):
        s = real(a).clone()
        flat = a.reshape(-1, *a.shape[-2:])
        for i, m in enumerate(flat):
            if poisoned(m):
                s.view(-1, s.shape[-1])[i] = float("nan")
        return s

    def numpy_route(a):
        if poisoned(torch.from_numpy(np.asarray(a))):
            raise checked._RouteFailed("info = 1")
        return np.linalg.svd(a, compute_uv=False)

    monkeypatch.setattr(torch.linalg, "svdvals", torch_route)
    monkeypatch.setattr(
        checked,
        "_SVD_ROUTES",
        (checked._SVD_ROUTES[0], ("gesvd", checked._each(numpy_route)), ("gejsv", checked._each(numpy_route))),
    )
    monkeypatch.setattr(certificates, "TINY_GRAM", float("inf"))
    monkeypatch.setattr(
        lapack, "decide_draws", lambda e, subs, *a, **kw: (np.zeros(len(subs), bool), np.zeros(len(subs), bool))
    )


def _positive_sum(m: torch.Tensor) -> bool:
    """The predicate the failing routes use: invariant under the exact power-of-two rescaling and row order."""
    return float(m.sum()) > 0


def test_decide_full_rank_leaves_undecided_what_no_route_gives(monkeypatch, capsys):
    """Against brute force: the subsets some route gives are decided as matrix_rank decides them; the others are
    undecided (never full), and one line per failed matrix names its size."""
    rule = RankRule.for_dtype(torch.float64)
    X = torch.randn(30, 12, generator=gen(7), dtype=torch.float64)
    X[20:] = X[:10] * -3  # dependent draws
    idx = torch.stack([torch.randperm(30, generator=gen(i))[:6] for i in range(40)])
    rows = X[idx]
    G = rows @ rows.transpose(-1, -2)
    brute = torch.tensor([int(torch.linalg.matrix_rank(r, rtol=rule.rtol_for(6, 12))) == 6 for r in rows])
    poisoned = torch.tensor([_positive_sum(r) for r in rows])
    assert poisoned.any() and (~poisoned).any()
    _no_route_for(monkeypatch, _positive_sum)
    dec = decide_full_rank(G.clone(), lambda j: rows[j], 6, 12, rule, what="the draw")
    assert torch.equal(dec.left_open(), poisoned)
    assert torch.equal(dec.full[~poisoned], brute[~poisoned]) and not dec.full[poisoned].any()
    ranks = gram_rank(G.clone(), lambda j: rows[j], 12, rule, left="left out")
    brute_rank = torch.tensor([int(torch.linalg.matrix_rank(r, rtol=rule.rtol_for(6, 12))) for r in rows])
    assert torch.equal(ranks[~poisoned], brute_rank[~poisoned]) and bool((ranks[poisoned] == -1).all())
    err = capsys.readouterr().err.strip().splitlines()
    assert err and all("6 x 12" in line and "left" in line for line in err if "no route left" in line), err
    assert "Traceback" not in "\n".join(err)
    with pytest.raises(NumericalFailure, match="6 x 12"):  # without ``left``, as before: it raises
        gram_rank(G.clone(), lambda j: rows[j], 12, rule)


def test_draws_no_route_decides_are_counted_undecided(monkeypatch, capsys):
    """subset_test: the undecided draws are counted in the record and left out of samples and the fraction; the
    others are decided as matrix_rank decides them."""
    X = torch.randn(40, 10, generator=gen(3), dtype=torch.float64)
    X[30:] = X[:10] * 0.5
    rule = RankRule.for_dtype(torch.float64)
    ref = mhaaudit.kruskal.draw_decisions(X, 4, samples=300, seed=2)  # the draws and their decisions
    subs, full = ref
    brute = torch.tensor([int(torch.linalg.matrix_rank(X[s], rtol=rule.rtol_for(4, 10))) == 4 for s in subs])
    assert torch.equal(full, brute)
    # the rows reach the SVD divided by a power of two, in any order: the predicate sees the same sign
    poisoned = torch.tensor([_positive_sum(X[s]) for s in subs])
    _no_route_for(monkeypatch, _positive_sum)
    r = subset_test(X, 4, samples=300, seed=2, threshold=0.5)
    assert r.undecided_draws == int(poisoned.sum()) > 0
    assert r.samples == 300 - r.undecided_draws
    assert r.satisfied == int((brute & ~poisoned).sum())
    assert r.record()["undecided_draws"] == r.undecided_draws
    assert "undecided" in r.reason
    if r.witness is not None:
        assert not _positive_sum(X[list(r.witness.indices)])
    err = capsys.readouterr().err
    assert "4 x 10" in err and "Traceback" not in err
    with pytest.raises(NumericalFailure):  # a yes-or-no per draw cannot say undecided
        mhaaudit.kruskal.draw_decisions(X, 4, samples=300, seed=2)


def test_kruskal_cli_with_undecided_draws_exits_0(monkeypatch, capsys, tmp_path):
    X = torch.randn(40, 10, generator=gen(3), dtype=torch.float64)
    path = tmp_path / "x.npy"
    np.save(path, X.numpy())
    _no_route_for(monkeypatch, _positive_sum)
    rc, out, err = run(capsys, "kruskal", path, "--k", "4", "--samples", "200", "--format", "json")
    assert rc == 0, err
    (rec,) = json.loads(out)["records"]
    assert rec["undecided_draws"] > 0 and rec["samples"] + rec["undecided_draws"] == 200
    assert "4 x 10" in err and "Traceback" not in err


def test_sweep_leaves_out_the_draws_no_route_decides(monkeypatch, capsys):
    """kruskal_sweep: a draw whose k* needs a decision no route gives is counted undecided and left out of the
    fractions; the run ends as usual."""
    from mhaaudit.kruskal import kruskal_sweep

    X = torch.randn(40, 10, generator=gen(3), dtype=torch.float64)
    X[30:] = X[:10] * 0.5
    ref = kruskal_sweep(X, samples=200, seed=2)
    assert ref.undecided_draws == 0
    _no_route_for(monkeypatch, _positive_sum)
    r = kruskal_sweep(X, samples=200, seed=2)
    assert r.undecided_draws > 0 and r.samples == 200 - r.undecided_draws
    assert r.summary()["undecided_draws"] == r.undecided_draws
    assert all(0.0 <= f <= 1.0 for f in r.fractions)
    if r.witness is not None:
        assert not _positive_sum(X[list(r.witness.indices)])
    assert "Traceback" not in capsys.readouterr().err


def test_a_sweep_no_draw_of_which_is_decided_keeps_its_proven_floor(monkeypatch, capsys):
    """kruskal_sweep where no route decides the draws (rank-3 rows and rows below the tolerance, so each draw
    goes to the SVD, and every SVD of a draw fails): no draw counts, and the estimate is the certified floor (what is
    proven), never below it."""
    from mhaaudit.kruskal import kruskal_sweep

    g = gen(0)
    X = torch.randn(60, 3, generator=g, dtype=torch.float64) @ torch.randn(3, 6, generator=g, dtype=torch.float64)
    X = torch.cat([X, torch.randn(20, 6, generator=g, dtype=torch.float64) * 1e-9])
    real = checked._svdvals

    def unusable(x, last):  # the draws' small matrices fail; the whole set's statistics do not
        s, usable = real(x, last)
        return (s, usable) if x.shape[-2] >= 6 else (s, torch.zeros_like(usable))

    monkeypatch.setattr(checked, "_SAID", set())
    monkeypatch.setattr(checked, "_svdvals", unusable)
    r = kruskal_sweep(X, samples=200, seed=1)
    assert r.undecided_draws > 0 and r.samples == 200 - r.undecided_draws
    assert r.floor.value >= 1 and r.floor.value <= r.estimate <= r.ceiling.value
    if r.samples == 0:
        assert r.estimate == r.floor.value
    assert "Traceback" not in capsys.readouterr().err


def test_a_gpu_s_small_eigenproblems_go_the_cpu_s_routes():
    """On a GPU, symmetric matrices of order above DEVICE_BATCHED_ORDER and up to HOST_EIGVALSH_MAX get their
    eigenvalues from the host's LAPACK; others, and any matrix on the CPU, where they lie."""
    cuda, most, least = torch.device("cuda"), checked.HOST_EIGVALSH_MAX, checked.DEVICE_BATCHED_ORDER + 1
    assert checked.on_host(cuda, least) and checked.on_host(cuda, most) and not checked.on_host(cuda, most + 1)
    assert not checked.on_host(cuda, least - 1)  # small ones stay: the device takes a batch of them together
    assert not checked.on_host(torch.device("cpu"), 40) and not checked.on_host(torch.device("meta"), 40)
    assert most >= 197  # a ViT's tokens


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("shape", [(23, 40, 30), (2, 7, 12, 20)])
def test_small_eigenproblems_take_one_thread_each_at_any_thread_count(monkeypatch, threads, shape):
    """Each symmetric matrix of order up to ONE_THREAD_ORDER gets its eigenvalues on one thread (NumPy's route), and
    ``certificates.eigvalsh`` deals a stack of them among the caller's threads (at least four matrices each): the
    values are LAPACK's for each matrix alone on one thread, whatever the thread count, flushing subnormals or
    not."""
    x = torch.randn(*shape, generator=gen(5), dtype=torch.float64)
    G = x @ x.transpose(-1, -2)
    with intra_op_threads(1):
        alone = np.stack([np.linalg.eigvalsh(g) for g in G.reshape(-1, *G.shape[-2:]).numpy()])
    pools: list[int] = []
    real = certificates.worker_pool
    monkeypatch.setattr(certificates, "worker_pool", lambda n, name: pools.append(n) or real(n, name))
    for flushing in (False, True):
        with intra_op_threads(threads), numerics() if flushing else contextlib.nullcontext():
            lam, ok = certificates.eigvalsh(G)
            plain = checked.eigvalsh(G)  # not dealt, and the same values
        assert lam.shape == G.shape[:-1] and ok.shape == G.shape[:-2] and bool(ok.all())
        assert np.array_equal(lam.reshape(alone.shape).numpy(), alone) and torch.equal(plain, lam)
    stack = math.prod(shape[:-2])
    assert pools == ([min(threads, stack // 4)] * 2 if threads > 1 else [])


def _spy_eigvalsh(monkeypatch) -> list[str]:
    """The devices torch.linalg.eigvalsh is called on, from now on."""
    seen: list[str] = []
    real = torch.linalg.eigvalsh
    monkeypatch.setattr(torch.linalg, "eigvalsh", lambda a, *args, **kw: seen.append(a.device.type) or real(a))
    return seen


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("shape", [(40, 50), (3, 40, 30), (1, 197, 768)])
def test_small_eigenproblems_on_cuda_are_the_cpu_s(monkeypatch, shape):
    """A small symmetric matrix on a GPU gets the CPU's eigenvalues (NumPy's LAPACK on the host), back on the GPU;
    the device's routine is not called for it."""
    x = torch.randn(*shape, generator=gen(3), dtype=torch.float64) / 8
    G = x @ x.transpose(-1, -2)
    seen = _spy_eigvalsh(monkeypatch)
    lam, ok = checked.eigvalsh_where_usable(G.cuda())
    assert seen == [] and lam.device.type == "cuda" and ok.device.type == "cuda" and bool(ok.all())
    assert torch.equal(lam.cpu(), checked.eigvalsh(G))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_larger_eigenproblems_on_cuda_stay_there(monkeypatch):
    """Past HOST_EIGVALSH_MAX the eigenvalues come from the device's routine."""
    n = checked.HOST_EIGVALSH_MAX + 1
    x = torch.randn(n, n + 9, generator=gen(4), dtype=torch.float64).cuda() / 8
    seen = _spy_eigvalsh(monkeypatch)
    lam = checked.eigvalsh(x @ x.T)
    assert seen == ["cuda"] and lam.device.type == "cuda"
