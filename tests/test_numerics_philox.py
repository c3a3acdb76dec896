"""The counter-based generator behind the Monte-Carlo draws: Philox4x32-10 in int64 tensor ops."""

from __future__ import annotations

import pytest
import torch

from mhaaudit.numerics.philox import MASK32, bounded, pairs, philox, sort_keys, split_key


@pytest.mark.parametrize(
    "counter, key, expected",
    [  # the known-answer vectors of the reference implementation (Random123, kat_vectors)
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((MASK32,) * 4, (MASK32,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ],
)
def test_known_answers(counter, key, expected):
    out = philox(*(torch.tensor(c) for c in counter), *key)
    assert tuple(int(w) for w in out) == expected


def _reference(counter, key):
    """Philox4x32-10 in Python integers, word by word."""
    c, (k0, k1) = list(counter), key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & MASK32, (p0 >> 32) ^ c[3] ^ k1, p0 & MASK32]
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return tuple(c)


def test_batched_words_equal_the_integer_reference():
    g = torch.Generator().manual_seed(3)
    C = torch.randint(0, 2**32, (200, 4), generator=g, dtype=torch.int64)
    K = torch.randint(0, 2**32, (200, 2), generator=g, dtype=torch.int64)
    out = torch.stack(philox(C[:, 0], C[:, 1], C[:, 2], C[:, 3], K[:, 0], K[:, 1]), dim=1)
    for row, c, k in zip(out.tolist(), C.tolist(), K.tolist(), strict=False):
        assert tuple(row) == _reference(c, k)


def test_pairs_read_consecutive_words_of_consecutive_counters():
    k0, k1, s = torch.tensor([11, 12]), torch.tensor([21, 22]), torch.tensor([5, 6])
    hi, lo = pairs(k0, k1, s, 0, 7)
    for i in range(2):
        for j in range(7):
            w = _reference((j // 2, int(s[i]), 0, 0), (int(k0[i]), int(k1[i])))
            assert (int(hi[i, j]), int(lo[i, j])) == ((w[0], w[1]) if j % 2 == 0 else (w[2], w[3]))
    hi2, lo2 = pairs(k0, k1, s, 3, 3)  # any window of a stream is the same stream
    assert torch.equal(hi2, hi[:, 3:6]) and torch.equal(lo2, lo[:, 3:6])
    # pinned: these words must never change (they fix every draw a seed gives)
    assert [hex(v) for v in pairs(torch.tensor([1]), torch.tensor([2]), torch.tensor([3]), 0, 3)[0][0].tolist()] == [
        "0x1fde9eb",
        "0xca810651",
        "0x3d5b182d",
    ]


def test_bounded_is_floor_of_the_scaled_64_bit_value():
    g = torch.Generator().manual_seed(1)
    hi = torch.randint(0, 2**32, (500,), generator=g, dtype=torch.int64)
    lo = torch.randint(0, 2**32, (500,), generator=g, dtype=torch.int64)
    for T in (1, 2, 3, 1000, 2**31 - 1):
        got = bounded(hi, lo, T).tolist()
        assert got == [((h << 32 | lw) * T) >> 64 for h, lw in zip(hi.tolist(), lo.tolist(), strict=False)]
    with pytest.raises(ValueError):
        bounded(hi, lo, 2**31)


def test_sort_keys_are_distinct_and_carry_the_position():
    hi = torch.zeros(1, 6, dtype=torch.int64)  # all random parts equal: ties broken by position
    keys = sort_keys(hi, hi.clone(), torch.arange(6), 3)
    assert keys.tolist() == [[0, 1, 2, 3, 4, 5]]
    assert int(sort_keys(torch.tensor([MASK32]), torch.tensor([MASK32]), torch.tensor([0]), 1)) == 2**63 - 2


def test_split_key():
    assert split_key(2**64 + 5 * 2**32 + 7) == (7, 5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_same_words_on_cuda():
    g = torch.Generator().manual_seed(4)
    C = torch.randint(0, 2**32, (4, 10000), generator=g, dtype=torch.int64)
    K = torch.randint(0, 2**32, (2, 10000), generator=g, dtype=torch.int64)
    cpu = philox(*C, *K)
    gpu = philox(*C.cuda(), *K.cuda())
    assert all(torch.equal(a, b.cpu()) for a, b in zip(cpu, gpu, strict=False))


def test_a_test_of_drawn_subsets_imports_no_sympy():
    """The draws broadcast their counters by NumPy's rule: torch.broadcast_shapes imports torch.fx's symbolic
    shapes and sympy on first use (0.5 s of a small ``kruskal`` run), which nothing else here needs."""
    import subprocess
    import sys

    code = (
        "import sys, torch; from mhaaudit.kruskal import subset_test; "
        "X = torch.randn(300, 64, generator=torch.Generator().manual_seed(0)); r = subset_test(X, 10, samples=100); "
        "print(r.samples, 'sympy' in sys.modules, 'torch.fx.experimental.symbolic_shapes' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["100", "False", "False"]


def test_the_broadcast_shape_is_torch_s():
    a, b = torch.zeros(3, 1, dtype=torch.int64), torch.zeros(1, 4, dtype=torch.int64)
    words = philox(a, b, 0, 0, 5, torch.zeros(4, dtype=torch.int64))
    assert all(w.shape == torch.broadcast_shapes(a.shape, b.shape) == (3, 4) for w in words)
