"""The streaming pass over a whole feature set, rows read where they lie, and the memory check."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from clitools import assert_one_error, run

from mhaaudit.errors import InputError
from mhaaudit.io import MappedArray, read_array
from mhaaudit.kruskal import set_stats
from mhaaudit.numerics import RankRule, row_norms, scaled, stream
from mhaaudit.numerics.stream import Rows, Unit, scan, tsqr


def _low_rank(T: int, d: int, r: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, r, generator=g, dtype=torch.float64) @ torch.randn(r, d, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("chunk_rows", [7, 1000])
def test_scan_is_the_whole_set_rescaled(monkeypatch, chunk_rows):
    """In chunks or in one, the pass finds the whole set's power of two, and its Gram, squared
    norms, smallest norms and zero rows are those of the rescaled set (``scale.scaled``)."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 8 * 5 * chunk_rows)
    X = torch.randn(60, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    X[40:] *= 2.0**30  # the exponent rises in the last chunks
    X[3] = 0.0
    sc = scan(Rows(X))
    unit = scaled(X, RankRule())
    assert sc.exponent == unit.exponent
    G = (unit.X.T @ unit.X).numpy()
    assert np.allclose(sc.gram, G, rtol=1e-12, atol=1e-14 * np.abs(G).max())
    assert np.allclose(sc.sqn, (unit.X**2).sum(1).numpy(), rtol=1e-13)
    assert np.array_equal(sc.small_norms, np.sort(row_norms(unit.X).numpy())[:5])
    assert (sc.zero_rows, sc.first_zero) == (1, 3)
    assert np.allclose(sc.proj, (unit.X.numpy() @ sc.u), rtol=1e-12, atol=1e-15) and math.isclose(
        np.linalg.norm(sc.u), 1
    )


def test_scan_refuses_nan_wherever_it_lies(monkeypatch):
    monkeypatch.setattr(stream, "CHUNK_BYTES", 8 * 4 * 10)
    X = torch.randn(50, 4)
    X[47, 2] = float("inf")
    X[49, 0] = float("nan")
    with pytest.raises(InputError, match=r"NaN or Inf values \(the first at row 47, column 2: inf\)"):
        scan(Rows(X))


def test_subnormal_rows_are_rescaled_exactly():
    X = torch.randn(20, 3, dtype=torch.float64) * 2.0**-1060  # every entry subnormal
    unit = Unit(Rows(X), scan(Rows(X)).exponent, RankRule())
    assert torch.equal(unit.rows(torch.arange(20)), scaled(X, RankRule()).X)


@pytest.mark.parametrize("chunk_rows", [9, 1000])
def test_tsqr_factor_has_the_sets_singular_values(monkeypatch, chunk_rows):
    monkeypatch.setattr(stream, "CHUNK_BYTES", 8 * 6 * chunk_rows)
    X = _low_rank(80, 6, 6)
    R = tsqr(Rows(X), 3)
    want = torch.linalg.svdvals(X * 2.0**-3)
    assert torch.allclose(torch.linalg.svdvals(torch.from_numpy(R)), want, rtol=1e-12)


@pytest.mark.parametrize("chunk_rows", [11, 1000])
def test_rank_deficient_set_takes_the_tsqr_pass_and_its_exact_rank(monkeypatch, chunk_rows):
    """A singular value at rounding level sits within the Gram's bound of the tolerances: the
    statistics come from the TSQR pass, and the rank is matrix_rank's."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 8 * 10 * chunk_rows)
    calls = []
    real = stream.tsqr
    monkeypatch.setattr("mhaaudit.kruskal.bounds.tsqr", lambda *a: calls.append(1) or real(*a))
    X = _low_rank(120, 10, 6, seed=2)
    rule = RankRule.for_dtype(torch.float64)
    st = set_stats(X, rule)
    assert calls and st.rank == int(torch.linalg.matrix_rank(X)) == 6


def test_full_rank_set_needs_one_pass(monkeypatch):
    monkeypatch.setattr("mhaaudit.kruskal.bounds.tsqr", lambda *a: pytest.fail("a second pass"))
    X = torch.randn(400, 16, generator=torch.Generator().manual_seed(5))
    st = set_stats(X, RankRule.for_dtype(X.dtype))
    assert st.rank == int(torch.linalg.matrix_rank(X.double(), rtol=400 * torch.finfo(torch.float32).eps)) == 16


def test_mapped_rows_are_the_files(tmp_path):
    a = np.random.default_rng(3).standard_normal((40, 7)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    X, _ = read_array(tmp_path / "a.npy")
    rows = Rows(X.array, mapped=True)
    assert rows.mapped and rows.dtype == torch.float32 and rows.shape == (40, 7)
    idx = torch.tensor([[5, 1, 39], [0, 2, 3]])
    assert torch.equal(rows.take(idx), torch.from_numpy(a).double()[idx])
    assert torch.equal(rows.chunk(10, 20), torch.from_numpy(a[10:20]).double())


def test_data_that_would_not_fit_is_refused_before_the_work(tmp_path, monkeypatch, capsys):
    """Past the memory it needs besides the mapped file, a run is refused at once, with the rows that
    would fit."""
    np.save(tmp_path / "a.npy", np.ones((1000, 8), dtype=np.float32))
    monkeypatch.setattr(stream, "available_memory", lambda: stream.memory_needed(400, 8))
    monkeypatch.setattr(stream, "scan", lambda rows: pytest.fail("work started"))
    rc, out, err = run(capsys, "kruskal", tmp_path / "a.npy", "--k", "4", "--samples", "10")
    line = assert_one_error(rc, err, "at most 400 rows of width 8 fit")
    assert "a.npy" in line and out == ""


def test_cli_record_names_the_storage_and_the_peak_memory(tmp_path, capsys):
    a = np.random.default_rng(4).standard_normal((300, 6)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    rc, out, err = run(capsys, "kruskal", tmp_path / "a.npy", "--k", "4", "--samples", "64", "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)
    meta = doc["meta"]
    assert meta["storage"] == "memory-mapped" and meta["peak_rss_bytes"] > 0
    assert doc["records"][0]["gram"] == "full"
    torch.save(torch.from_numpy(a), tmp_path / "a.pt")
    rc, out2, err = run(capsys, "kruskal", tmp_path / "a.pt", "--k", "4", "--samples", "64", "--format", "json")
    doc2 = json.loads(out2)
    assert doc2["meta"]["storage"] == "memory"
    assert [r["satisfied"] for r in doc2["records"]] == [r["satisfied"] for r in doc["records"]]
    assert isinstance(read_array(tmp_path / "a.npy")[0], MappedArray)


def test_an_all_zero_first_chunk_fixes_no_scale(monkeypatch):
    """Zero rows first: the exponent is the first non-zero chunk's, as ``scaled`` gives it."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 8 * 16 * 50)
    for e in (-600, -40, 0, 300):
        X = torch.zeros(400, 16, dtype=torch.float64)
        X[200:] = torch.randn(200, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2.0**e
        rule = RankRule.for_dtype(X.dtype)
        st = set_stats(X, rule)
        assert st.exponent == scaled(X, rule).exponent and st.rank == 16, e


def test_scan_is_the_same_whatever_the_callers_blas_threads(monkeypatch):
    """The pass runs its products on one BLAS thread, with the next chunk read on a second thread:
    the same bits whatever thread count the caller set, over chunks whose exponent rises and rows
    whose rescaled entries are subnormal."""
    from threadpoolctl import threadpool_limits

    monkeypatch.setattr(stream, "CHUNK_BYTES", 8 * 12 * 50)
    g = torch.Generator().manual_seed(8)
    X = torch.randn(400, 12, dtype=torch.float64, generator=g) * torch.exp2(
        torch.randint(-1060, 200, (400, 1), generator=g).double()
    )
    X[17] = 0.0
    scans = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            scans.append(scan(Rows(X)))
    a, b = scans
    for f in a.__dataclass_fields__:
        va, vb = getattr(a, f), getattr(b, f)
        assert np.array_equal(va, vb) if isinstance(va, np.ndarray) else va == vb, f
    assert a.zero_rows == 1 and a.first_zero == 17
