"""Assumption 2 and the check wrappers against brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mhaaudit.checks import (
    CHECK_MEANING,
    CHECK_TITLES,
    CHECKS,
    REGISTRY,
    ContextRanks,
    assumption_1,
    assumption_2,
    assumption_2_from_arrays,
    assumption_3,
    context_ranks,
    general_position,
)
from mhaaudit.errors import InputError
from mhaaudit.numerics import RankRule, batch_ranks


def _ref_ranks(E, rule):
    out = []
    for e in E:
        e = e.double()
        out.append(int(torch.linalg.matrix_rank(e, rtol=rule.rtol_for(*e.shape), atol=rule.atol_value)))
    return torch.tensor(out)


def test_a_tensor_that_requires_grad_is_audited_as_its_values():
    """A model's parameters or activations that carry autograd (``requires_grad``) are read as their values by
    the library's checks, with the results of the same values without it."""
    from mhaaudit.kruskal import subset_test

    g = torch.Generator().manual_seed(3)
    X, E = torch.randn(30, 6, generator=g), torch.randn(4, 5, 6, generator=g)
    E[0, 4] = E[0, 3]  # one deficient context matrix
    assert assumption_2(E.clone().requires_grad_()) == assumption_2(E)
    grad = subset_test(torch.nn.Parameter(X.clone()), k=6, samples=40, seed=1)
    plain = subset_test(X, k=6, samples=40, seed=1)
    assert (grad.satisfied, grad.samples, grad.verdict) == (plain.satisfied, plain.samples, plain.verdict)


def test_context_ranks_equal_matrix_rank_on_mixed_batch():
    g = torch.Generator().manual_seed(0)
    n, d = 6, 10
    E = torch.randn(40, n, d, generator=g)
    E[3, 5] = E[3, 1]  # a duplicated token: rank n - 1
    E[7] = torch.randn(n, 2, generator=g) @ torch.randn(2, d, generator=g)  # rank 2
    E[9, 4] = E[9, 0] + 1e-9 * torch.randn(d, generator=g)  # below the tolerance
    E[11, 2] = E[11, 0] + 1e-2 * torch.randn(d, generator=g)  # far above it
    rule = RankRule.for_dtype(E.dtype)
    rank, smin, smax, _tol = context_ranks(E, rule)
    assert torch.equal(rank.cpu(), _ref_ranks(E, rule))
    assert rank[3] == n - 1 and rank[7] == 2 and rank[9] == n - 1 and rank[11] == n
    ref = torch.linalg.svdvals(E.double())
    full = rank == n
    # the square roots of the Gram matrix's extreme eigenvalues: the SVD's to rounding (for a full-rank
    # matrix, sigma_min too; a deficient one's is rounding noise, below the tolerance)
    assert torch.allclose(smax, ref[:, 0], rtol=1e-12, atol=0)
    assert torch.allclose(smin[full], ref[full, -1], rtol=1e-9, atol=0)
    assert bool((smin[~full] <= _tol[~full]).all())


def test_context_ranks_equal_matrix_rank_at_the_tolerance():
    """Matrices whose smallest singular value sits just above, at and just below the tolerance (relative
    distances 1e-3 to 1e-9): the rank is torch.linalg.matrix_rank's on every one."""
    g = torch.Generator().manual_seed(4)
    n, d = 6, 10
    rule = RankRule.for_dtype(torch.float32)
    tol = rule.rtol_for(n, d)  # sigma_max = 1
    mats = []
    for factor in (1 - 1e-3, 1 - 1e-6, 1 - 1e-9, 1.0, 1 + 1e-9, 1 + 1e-6, 1 + 1e-3, 0.0, 2.0):
        U = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))[0]
        V = torch.linalg.qr(torch.randn(d, n, generator=g, dtype=torch.float64))[0]
        s = torch.tensor([1.0, 0.7, 0.3, 0.1, 0.01, tol * factor], dtype=torch.float64)
        mats.append(U @ torch.diag(s) @ V.T)
    E = torch.stack(mats)
    rank = context_ranks(E, rule)[0]
    assert torch.equal(rank, _ref_ranks(E, rule))
    assert set(rank.tolist()) == {n - 1, n}  # both sides of the tolerance are represented


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("scale", [1.0, 2.0**-135])  # 2**-135: float32 subnormals (the batch's top is one too)
def test_context_ranks_decide_each_matrix_on_its_own(threads, scale):
    """A matrix's rank, sigmas and tolerance are the same alone as in any batch, dealt among any number
    of worker threads, beside matrices of any other size (one power of two rescales the whole batch)."""
    from mhaaudit.numerics.threads import intra_op_threads

    g = torch.Generator().manual_seed(2)
    n, d = 5, 9
    E = torch.randn(11, n, d, generator=g, dtype=torch.float64)
    E[2] *= 2.0**40 if scale == 1.0 else 2.0**5  # (below 2**-126 every entry stays a subnormal)
    E[6, 4] = E[6, 1]
    E = (E * scale).to(torch.float32)
    rule = RankRule.for_dtype(torch.float32)
    with intra_op_threads(threads):
        batch = context_ranks(E, rule)
    assert int(batch[0][6]) == n - 1 and int((batch[0] == n).sum()) == 10
    for j in range(E.shape[0]):
        alone = context_ranks(E[j : j + 1], rule)
        for a, b in zip(alone, batch, strict=True):
            assert torch.equal(a, b[j : j + 1]), (j, a, b[j])


def _hard_batch(seed: int = 5) -> tuple[torch.Tensor, RankRule]:
    """Nine 5 x 8 context matrices: one deficient, one at the tolerance (the SVD of its rows decides), one far
    below the batch's largest (decided on its own scale, from its rows as given)."""
    g = torch.Generator().manual_seed(seed)
    E = torch.randn(9, 5, 8, generator=g, dtype=torch.float64)
    E[3, 4] = E[3, 2]
    rule = RankRule.for_dtype(torch.float32)
    U, s, Vh = torch.linalg.svd(E[6], full_matrices=False)
    s[-1] = s[0] * rule.rtol_for(5, 8)
    E[6] = U @ torch.diag(s) @ Vh
    E[7] *= 2.0**-1000
    return E, rule


def _agree(via, host, n: int) -> None:
    """The device route's results are the host route's: the same ranks; sigma_max and the tolerance to rounding;
    sigma_min to rounding far below the tolerance (a deficient matrix's is rounding noise: not compared)."""
    assert torch.equal(via[0], host[0])
    assert torch.allclose(via[2], host[2], rtol=1e-12) and torch.allclose(via[3], host[3], rtol=1e-12)
    full = host[0] == n
    assert bool(((via[1] - host[1]).abs()[full] <= 1e-3 * host[3][full]).all())


def test_the_device_route_gives_the_host_route_s_results(monkeypatch):
    """On a device the Gram matrices are formed there, reduced to tridiagonal form there, and the extremes of
    those forms found on the host's threads, a batch a job: that route, run here on CPU tensors, gives the
    ranks of the CPU's own route and its sigmas to rounding, batch by batch, each in its own units."""
    from mhaaudit.numerics.scale import exponent_for

    E, rule = _hard_batch()
    host = context_ranks(E, rule)
    assert int(host[0][3]) == 4 and int(host[0][7]) == 5 and 0 < float(host[1][7]) < 2.0**-990  # (not flushed)
    seen = []
    real = batch_ranks._run
    monkeypatch.setattr(
        batch_ranks,
        "_run",
        lambda jobs, workers, device: seen.append((len(jobs), workers)) or real(jobs, workers, device),
    )
    monkeypatch.setattr(batch_ranks, "_TRIDIAGONAL_BYTES", 4 * 5 * 5 * 8)  # the forms in parts of four matrices
    monkeypatch.setattr(batch_ranks, "_DEVICE_PART_BYTES", 2 * 5 * 8 * 8)  # the Gram matrices two examples at a time
    parts = [E[:4], E[4:7], E[7:8], E[8:]]
    batches = [batch_ranks.DeviceBatch.of(x, rule, exponent_for(x, float(x.abs().max()))) for x in parts]
    assert batches[2].e < batches[0].e - 900  # the third batch's own power of two: its matrix is not flushed
    via = batch_ranks.device_ranks(batches, rule, 16)
    # on at most _BISECTION_WORKERS threads (4), parts of at most 3 consecutive examples of one batch: 4 = 3 + 1
    assert batch_ranks._BISECTION_WORKERS == 4 and seen == [(5, 4)]
    _agree(via, host, 5)
    assert torch.allclose(via[1][7], host[1][7], rtol=1e-12, atol=0)  # in its own units: not flushed


def test_context_ranks_keeps_a_device_s_batches_and_decides_them_in_order(monkeypatch):
    """``ContextRanks`` keeps a device's batches until they hold ``_PENDING_BYTES`` (then decides them at once)
    or its arrays are read: the statistics are the host route's, in the order fed, whatever the grouping; a
    batch the caller changes after feeding it is decided as it was fed; empty batches change nothing."""
    from mhaaudit import contexts

    E, rule = _hard_batch()
    E = torch.cat([E, _hard_batch(6)[0]])
    host = context_ranks(E, rule)
    monkeypatch.setattr(contexts, "_HOST_DEVICES", ())  # CPU tensors take the device route
    decided = []
    real = contexts.device_ranks
    monkeypatch.setattr(contexts, "device_ranks", lambda b, r, w: decided.append(len(b)) or real(b, r, w))
    per_batch = 3 * 5 * 8 * 8 + 3 * 5 * 5 * 8  # the bytes of a batch of three and of its Gram matrices
    for limit, groups in ((2**30, [6]), (2 * per_batch, [2, 2, 2]), (1, [1] * 6)):
        monkeypatch.setattr(contexts, "_PENDING_BYTES", limit)
        decided.clear()
        acc = ContextRanks(rule)
        for part in E.split(3):
            part = part.clone()
            acc.update(part)
            part.fill_(float("nan"))  # the caller reuses its buffer: what was fed is decided
            acc.update(E[:0])
        a = acc.arrays()
        assert decided == groups
        _agree((a["context_rank"], a["context_sigma_min"], a["context_sigma_max"], a["context_tol"]), host, 5)
        assert acc.arrays()["context_rank"].shape == (18,) and decided == groups  # nothing left to decide
    with pytest.raises(InputError, match="NaN"):
        ContextRanks(rule).update(E.masked_fill(E > 2, float("inf")))
    # a batch decided at once (here: on the host's route) comes after those kept before it
    monkeypatch.setattr(contexts, "_PENDING_BYTES", 2**30)
    acc = ContextRanks(rule)
    for part in E[:9].split(3):
        acc.update(part)
    assert len(acc._pending) == 3
    monkeypatch.setattr(contexts, "_HOST_DEVICES", ("cpu",))
    acc.update(E[9:])
    assert not acc._pending and acc.arrays()["context_rank"].tolist() == host[0].tolist()


def test_batches_a_failed_decision_leaves_are_still_kept(monkeypatch):
    """Where deciding the kept batches fails (the device out of memory, say), the error is raised and the batches
    stay kept: the statistics read later count every example fed, not those of the batches after the failure, and
    the next call decides the group that failed again, no larger, then the rest."""
    from mhaaudit import contexts

    E, rule = _hard_batch()
    E = torch.cat([E, _hard_batch(6)[0]])
    monkeypatch.setattr(contexts, "_HOST_DEVICES", ())
    monkeypatch.setattr(contexts, "_PENDING_BYTES", 3200)  # groups of two batches of three (1560 B each)
    real, calls = contexts.device_ranks, []

    def once_out_of_memory(b, r, w):
        calls.append(len(b))
        if len(calls) == 1:
            raise torch.cuda.OutOfMemoryError("out of memory")
        return real(b, r, w)

    monkeypatch.setattr(contexts, "device_ranks", once_out_of_memory)
    acc = ContextRanks(rule)
    parts = E.split(3)
    acc.update(parts[0])
    acc.update(parts[1])
    with pytest.raises(torch.cuda.OutOfMemoryError):
        acc.update(parts[2])  # the first two batches fail; all three stay kept
    assert len(acc._pending) == 3
    for part in parts[3:]:
        acc.update(part)
    a = acc.arrays()
    assert calls == [2, 2, 2, 2] and a["context_rank"].shape == (18,)
    host = context_ranks(E, rule)
    _agree((a["context_rank"], a["context_sigma_min"], a["context_sigma_max"], a["context_tol"]), host, 5)


@pytest.mark.parametrize("extremes", ["none", "unusable"])
def test_the_extremes_route_gives_the_whole_spectrum_s_results(monkeypatch, extremes):
    """Matrices clear of the tolerance take only their extreme eigenvalues; the same batch decided from every
    matrix's whole spectrum (no extremes routine, or one whose values fail their checks) gives the same
    ranks, and sigmas and tolerances equal to rounding."""

    g = torch.Generator().manual_seed(8)
    n, d = 6, 10
    rule = RankRule.for_dtype(torch.float32)
    E = torch.randn(12, n, d, generator=g, dtype=torch.float64)
    E[2, 5] = E[2, 0]  # deficient
    U, s, Vh = torch.linalg.svd(E[4], full_matrices=False)
    s[-1] = s[0] * rule.rtol_for(n, d) * (1 + 1e-9)  # at the tolerance: not clear of it
    E[4] = U @ torch.diag(s) @ Vh
    both = context_ranks(E, rule)
    if extremes == "none":
        monkeypatch.setattr(batch_ranks, "extreme_eigenvalues", lambda G: None)
    else:
        real = batch_ranks.extreme_eigenvalues
        monkeypatch.setattr(batch_ranks, "extreme_eigenvalues", lambda G: (*real(G)[:2], np.zeros(len(G), dtype=bool)))
    whole = context_ranks(E, rule)
    assert torch.equal(both[0], whole[0]) and torch.equal(both[0], _ref_ranks(E, rule))
    assert int(both[0][2]) == n - 1
    full = both[0] == n
    assert torch.allclose(both[2], whole[2], rtol=1e-14) and torch.allclose(both[3], whole[3], rtol=1e-14)
    assert torch.allclose(both[1][full], whole[1][full], rtol=1e-9)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_context_ranks_on_cuda_equal_the_cpu_s():
    g = torch.Generator().manual_seed(6)
    E = torch.randn(40, 6, 10, generator=g)
    E[7, 5] = E[7, 1]
    rule = RankRule.for_dtype(E.dtype)
    cpu, cuda = context_ranks(E, rule), context_ranks(E.cuda(), rule)
    assert all(x.device.type == "cuda" for x in cuda)
    cuda = tuple(x.cpu() for x in cuda)
    assert torch.equal(cuda[0], cpu[0])
    full = cpu[0] == 6
    assert torch.allclose(cuda[2], cpu[2], rtol=1e-12) and torch.allclose(cuda[3], cpu[3], rtol=1e-12)
    assert bool(((cuda[1] - cpu[1]).abs()[full] <= 1e-3 * cpu[3][full]).all())


@pytest.mark.parametrize("route", ["host", "device"])
def test_a_margin_near_the_tolerance_is_the_svd_s(monkeypatch, route):
    """A context matrix whose smallest singular value lies near the tolerance is decided by the SVD, and its
    sigma_min, tolerance and margin are the SVD's too: the root of its Gram matrix's smallest eigenvalue (whose
    rounding error, about eps sigma_max^2, exceeds sigma_min^2) gave 0 or a million times the value."""
    from mhaaudit import contexts
    from mhaaudit.numerics import svd_rank

    if route == "device":
        monkeypatch.setattr(contexts, "_HOST_DEVICES", ())
    rule = RankRule.for_dtype(torch.float64)
    g = torch.Generator().manual_seed(1)
    E = torch.randn(5, 2, 2, generator=g, dtype=torch.float64)  # tolerance 2 eps sigma_max = 4.4e-16
    for i, small in ((1, 1.5e-15), (3, 1e-16)):  # full rank (margin about 3.4), deficient (about 0.23)
        U, _, Vh = torch.linalg.svd(E[i], full_matrices=False)
        E[i] = U @ torch.diag(torch.tensor([1.0, small], dtype=torch.float64)) @ Vh
    ref = svd_rank(E, rule)
    acc = ContextRanks(rule)
    acc.update(E)
    a = acc.arrays()
    assert torch.equal(a["context_rank"], ref[0]) and a["context_rank"].tolist() == [2, 2, 2, 1, 2]
    for got, want in ((a["context_sigma_min"], ref[1]), (a["context_tol"], ref[3])):
        assert torch.allclose(got[[1, 3]], want[[1, 3]], rtol=1e-12, atol=0)
    res = acc.result()
    assert res.verdict == "fails" and res.deficient_examples == (3,)
    assert res.worst_example == 3 and res.min_margin == pytest.approx(float(ref[1][3] / ref[3][3]), rel=1e-12)
    margin_1 = float(a["context_sigma_min"][1] / a["context_tol"][1])
    assert 2 < margin_1 < 5 and margin_1 == pytest.approx(float(ref[1][1] / ref[3][1]), rel=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_streamed_context_ranks_on_cuda_equal_the_cpu_s(monkeypatch):
    """Batches fed on a GPU are kept there and decided in groups (the GPU's tridiagonal forms): the ranks
    are the CPU's, the sigmas equal to rounding, in the order fed, and the arrays are on the CPU."""
    from mhaaudit import contexts

    E, rule = _hard_batch()
    E = torch.cat([E, _hard_batch(6)[0]])
    host = context_ranks(E, rule)
    per_batch = 3 * 5 * 8 * 8 + 3 * 5 * 5 * 8  # the bytes of a batch of three and of its Gram matrices
    monkeypatch.setattr(contexts, "_PENDING_BYTES", 2 * per_batch)  # a group every second batch
    monkeypatch.setattr(contexts, "_PENDING_LEAST", 0)
    decided, real = [], contexts.device_ranks
    monkeypatch.setattr(contexts, "device_ranks", lambda b, r, w: decided.append(len(b)) or real(b, r, w))
    acc = ContextRanks(rule)
    for part in E.cuda().split(3)[:5]:
        acc.update(part)
    assert decided == [2, 2] and len(acc._pending) == 1  # the fifth kept on the device until read
    acc.update(E.cuda()[15:])
    a = acc.arrays()
    assert decided == [2, 2, 2]
    assert all(x.device.type == "cpu" for x in a.values())
    _agree((a["context_rank"], a["context_sigma_min"], a["context_sigma_max"], a["context_tol"]), host, 5)


def test_assumption_2_counts_and_verdict():
    g = torch.Generator().manual_seed(1)
    E = torch.randn(30, 5, 12, generator=g)
    res = assumption_2(E)
    assert res.verdict == "holds" and res.full == 30 and res.deficient == 0 and res.min_margin > 1
    E[4, 1] = E[4, 0]
    E[17, 2] = 0
    res = assumption_2(E)
    assert res.verdict == "fails" and res.full == 28 and res.deficient_examples == (4, 17)
    assert res.rank_histogram == {4: 2, 5: 28}
    rec = res.record()
    assert rec["check"] == "assumption_2" and rec["satisfied"] == 28 and rec["witness"] == [4, 17]


def test_assumption_2_n_above_d_fails_at_once():
    res = assumption_2(torch.randn(4, 9, 6))
    assert res.verdict == "fails" and "n = 9 > d = 6" in res.reason


def test_wrappers_use_the_papers_sizes():
    g = torch.Generator().manual_seed(2)
    Q = torch.randn(80, 16, generator=g)
    r1 = assumption_1(Q, 10, samples=200)
    assert r1.check == "assumption_1" and r1.k == 10 and r1.verdict == "holds"
    gp = general_position(Q, samples=200)
    assert gp.check == "general_position" and gp.k == 16 and gp.verdict == "holds"
    r3 = assumption_3(torch.ones(80, 16), 10, samples=200)
    assert r3.check == "assumption_3" and r3.verdict == "fails" and not r3.sampled


def test_registry_names_each_check_and_its_size():
    assert CHECKS == tuple(REGISTRY) == ("general_position", "assumption_1", "assumption_2", "assumption_3")
    n, T, d = 5, 80, 16
    assert [REGISTRY[c].k(n, T, d) for c in CHECKS] == [16, 5, 5, 5]
    assert REGISTRY["general_position"].k(n, 10, d) == 10  # min(T, d)
    assert [REGISTRY[c].run for c in CHECKS] == [general_position, assumption_1, assumption_2, assumption_3]
    assert [REGISTRY[c].estimated for c in CHECKS] == [True, True, False, True]
    assert [REGISTRY[c].vectors for c in CHECKS] == ["queries", "queries", "context", "a3"]
    assert CHECK_TITLES["assumption_2"] == "Assumption 2" and CHECK_TITLES["kruskal"] == "Kruskal test"
    assert CHECK_MEANING["assumption_1"].startswith("every n query vectors")


def test_registry_fields_are_what_they_say():
    """Each check names a real attribute of a FeatureSet; ``depends_on_n`` is what its size does; and a
    check is declared by keyword only."""
    import dataclasses

    from mhaaudit.checks import Check
    from mhaaudit.features import FeatureSet

    attributes = {f.name for f in dataclasses.fields(FeatureSet)}
    for c in REGISTRY.values():
        assert c.vectors in attributes, c.name
        sizes = {c.k(n, 80, 16) for n in (1, 2, 7)}
        assert (len(sizes) > 1) == c.depends_on_n, c.name
    assert [REGISTRY[c].size_at(5, 80, 16) for c in CHECKS] == ["k = 16", "k = 5", "rank 5", "k = 5"]
    with pytest.raises(TypeError):
        Check("x", "X", "", "queries", "k", lambda n, T, d: n, True, general_position, True)  # type: ignore[misc]


@pytest.mark.parametrize(
    "dtype, scales",
    [(torch.float64, (1e-300, 1e-150, 1e150, 1e300)), (torch.float32, (2.0**-100, 2.0**-50, 2.0**50, 2.0**100))],
)
def test_assumption_2_is_the_same_at_every_scale(dtype, scales):
    g = torch.Generator().manual_seed(1)
    E = torch.randn(30, 5, 12, generator=g).to(dtype)
    E[20, 3] = E[20, 0] + 1e-3 * torch.randn(12, generator=g).to(dtype)  # full rank, closer to the tolerance
    failing = E.clone()
    failing[4, 1] = failing[4, 0]
    failing[17, 2] = 0
    rule = RankRule.for_dtype(torch.float32)
    base, base_fail = assumption_2(E, rule), assumption_2(failing, rule)
    assert base.verdict == "holds" and base.worst_example == 20 and base_fail.verdict == "fails"
    r0, smin0, smax0, tol0 = context_ranks(failing, rule)
    full = r0 == 5
    for scale in scales:
        res, fail = assumption_2(E * scale, rule), assumption_2(failing * scale, rule)
        assert (res.verdict, res.reason, res.full, res.worst_example) == (
            base.verdict,
            base.reason,
            base.full,
            base.worst_example,
        )
        assert res.min_margin == pytest.approx(base.min_margin, rel=1e-6)  # (the scales are not all powers of two)
        assert (fail.verdict, fail.reason, fail.full, fail.deficient, fail.rank_histogram, fail.deficient_examples) == (
            base_fail.verdict,
            base_fail.reason,
            base_fail.full,
            base_fail.deficient,
            base_fail.rank_histogram,
            base_fail.deficient_examples,
        )
        r, smin, smax, tol = context_ranks(failing * scale, rule)
        assert torch.equal(r, r0)
        # in the data's own units (sigma_min of a deficient matrix is rounding noise: not compared)
        for a, b in ((smin[full], smin0[full]), (smax, smax0), (tol, tol0)):
            assert torch.allclose(a / scale, b, rtol=1e-6, atol=0)


# --------------------------------------------------------------------------- the registry drives every run


def _features(Q, E):
    """What a run reads (the fields of a FeatureSet): queries, A3 vectors, context statistics."""
    from types import SimpleNamespace

    from mhaaudit.checks import ContextRanks

    acc = ContextRanks(RankRule.for_dtype(E.dtype))
    acc.update(E)
    T, n, d = E.shape
    return SimpleNamespace(queries=Q, a3=Q + E.mean(1), context=acc.arrays(), n=n, d=d, T=T)


def test_each_registered_check_decides_what_its_function_returns():
    """A run decides a check with Check.decide; for the built-in checks that is the result of the
    check's own function on the same vectors, to the record."""
    g = torch.Generator().manual_seed(3)
    E = torch.randn(60, 5, 12, generator=g, dtype=torch.float64)
    E[9, 4] = E[9, 0]
    Q = E[:, 0].clone()
    Q[7] = Q[2] + Q[3]  # a dependent triple the draws may find
    fs = _features(Q, E)
    rule = RankRule.for_dtype(torch.float64)
    draws = dict(samples=300, threshold=0.99, seed=4)
    for name in CHECKS:
        c = REGISTRY[name]
        got = c.decide(fs, rule=rule, **({} if not c.estimated else draws))
        if name == "assumption_2":
            want = c.run(E, rule=rule)
        elif name == "general_position":
            want = c.run(fs.queries, rule=rule, **draws)
        else:
            want = c.run(getattr(fs, c.vectors), fs.n, rule=rule, **draws)
        assert got.record() == want.record(), name
        assert got.check == name


def test_check_for_size_names_a_test_after_the_registered_check_it_answers():
    from mhaaudit.checks import check_for_size

    assert check_for_size(5, n=5, T=80, d=16, vectors="queries") == "assumption_1"
    assert check_for_size(16, n=5, T=80, d=16, vectors="queries") == "general_position"
    assert check_for_size(16, n=16, T=80, d=16, vectors="queries") == "assumption_1"  # k = n = min(T, d)
    assert check_for_size(5, n=5, T=80, d=16, vectors="a3") == "assumption_3"
    assert check_for_size(16, n=None, T=80, d=16, vectors="queries") == "general_position"
    assert check_for_size(5, n=None, T=80, d=16, vectors="queries") == "kruskal"
    assert check_for_size(16, n=5, T=80, d=16, vectors="a3") == "kruskal"


@pytest.fixture()
def toy_check(monkeypatch):
    """A check registered for one test, and removed after it: no two query vectors are parallel
    (every pair independent, a Kruskal test at k = 2)."""
    from mhaaudit.checks import Check
    from mhaaudit.kruskal import subset_test

    def pairs(queries, **kw):
        return subset_test(queries, 2, check="pairs", **kw)

    check = Check(
        name="pairs",
        title="Pairs",
        meaning="no two query vectors are parallel (Kruskal rank >= 2)",
        vectors="queries",
        size="k",
        k=lambda n, T, d: 2,
        depends_on_n=False,
        run=pairs,
        estimated=True,
    )
    monkeypatch.setitem(REGISTRY, "pairs", check)
    return check


def test_a_registered_check_is_in_the_table_the_json_and_the_parquet(
    toy_check, vit_dir, image_dir, capsys, monkeypatch, tmp_path
):
    """One entry plus its function: check runs it in every column and every output shows it."""
    import json

    import pyarrow.parquet as pq
    from clitools import run

    small = [
        "check",
        vit_dir,
        "--data",
        image_dir,
        "--limit",
        40,
        "--samples",
        50,
        "--batch-size",
        16,
        "--variants",
        "embedding",
        "--variants",
        "random",
        "--fail-on",
        "pairs",
    ]
    monkeypatch.setenv("COLUMNS", "200")
    rc, out, err = run(capsys, *small, "--out", tmp_path / "r.parquet")
    assert rc in (0, 1), err
    row = next(line for line in out.splitlines() if line.startswith("│ Pairs"))
    assert out.count("│ Pairs") == 1 and "k = 2" in out.split("│ Pairs")[1].split("\n")[1]
    assert "[random] Pairs: " in out and "Pairs: no two query vectors are parallel (Kruskal rank >= 2)." in out
    assert row.count("holds") + row.count("fails") == 2  # a verdict in both columns

    rc, out, err = run(capsys, *small, "--format", "json")
    assert rc in (0, 1), err
    doc = json.loads(out)
    recs = [r for r in doc["records"] if r["check"] == "pairs"]
    assert [(r["variant"], r["k"], r["samples"] <= 50) for r in recs] == [("embedding", 2, True), ("random", 2, True)]
    assert [r["check"] for r in doc["records"][:5]] == [*CHECKS, "pairs"]

    table = pq.read_table(tmp_path / "r.parquet").to_pylist()
    by_check = [r for r in table if r["check"] == "pairs"]
    assert [(r["variant"], r["k"], r["verdict"]) for r in by_check] == [(r["variant"], 2, r["verdict"]) for r in recs]
    failed = any("fails" in (r["verdict"], r["exact_status"]) for r in recs)
    assert rc == (1 if failed else 0)  # --fail-on takes the registered name


def test_a_registered_check_names_the_kruskal_test_at_its_size(toy_check, tmp_path, capsys):
    import json

    import numpy as np
    from clitools import run

    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((40, 8)))
    rc, out, err = run(capsys, "kruskal", tmp_path / "x.npy", "--k", 2, "--k", 3, "--samples", 50, "--format", "json")
    assert rc == 0, err
    assert [r["check"] for r in json.loads(out)["records"]] == ["pairs", "kruskal"]
    rc, out, err = run(capsys, "kruskal", tmp_path / "x.npy", "--k", 2, "--samples", 50)
    assert rc == 0, err
    assert "│ Pairs " in out


def test_context_statistics_that_contradict_themselves_prove_nothing():
    """A rank n is decided from a sigma_min that clears the tolerance, and a lower rank from one that does not: an
    edited feature file whose counts say otherwise gives no Assumption 2 verdict, never "holds (exhaustive)"."""
    E = torch.randn(6, 4, 8, generator=torch.Generator().manual_seed(0))
    E[2, 3] = E[2, 0] + E[2, 1]  # example 2 has rank 3
    rule = RankRule.for_dtype(torch.float32)
    acc = ContextRanks(rule)
    acc.update(E)
    a = acc.arrays()
    honest = assumption_2_from_arrays(a, n=4, d=8, rule=rule)
    assert (honest.verdict, honest.deficient_examples) == ("fails", (2,))
    edited = {**a, "context_rank": a["context_rank"].clone()}
    edited["context_rank"][2] = 4  # "full rank", beside its own sigma_min below the tolerance
    r = assumption_2_from_arrays(edited, n=4, d=8, rule=rule)
    assert (r.verdict, r.exact_status, r.proven) == ("unavailable", "undecided", False)
    assert "contradict themselves: example 2 has rank 4 of n = 4" in r.reason
    for bad in (5, -1):  # no rank above n, nor a rank left undecided where n <= d
        edited["context_rank"][2] = bad
        assert assumption_2_from_arrays(edited, n=4, d=8, rule=rule).verdict == "unavailable"
