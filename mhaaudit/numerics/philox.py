"""Philox4x32-10, the counter-based generator of Salmon et al. (SC'11), in int64 tensor ops.

``philox(c0, c1, c2, c3, k0, k1)`` maps a 128-bit counter (four 32-bit words) and a 64-bit key
(two words) to four 32-bit random words. Every word is held in an int64 tensor and every product
is split so that no intermediate reaches 2^50: no operation overflows or rounds, so the same
counters and key give bit-identical words on the CPU, on CUDA and on any other torch device, in
any batch shape. The stream is a pure function of (key, counter), with no generator state: any
part of it can be computed in any order, in parallel, on any device. The known-answer vectors of
the reference implementation (Random123) are reproduced (``tests/test_numerics_philox.py``).

``pairs`` reads a stream as consecutive 64-bit values (two words each), and ``bounded``,
``sort_keys`` turn them into uniform integers below T and distinct sort keys: the Monte-Carlo
draws of ``kruskal.sampling`` are built from them.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["MASK32", "ROUNDS", "bounded", "pairs", "philox", "sort_keys", "split_key"]

MASK32 = 0xFFFFFFFF
ROUNDS = 10
_M0, _M1 = 0xD2511F53, 0xCD9E8D57  # the Philox4x32 multipliers
_W0, _W1 = 0x9E3779B9, 0xBB67AE85  # the Weyl key increments


def _mulhilo(a: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32-bit words of the 64-bit product ``a * m`` (a: words in int64, m < 2^32).

    With m = m_lo + 2^16 m_hi, a m = p0 + 2^16 p1 where p0 = a m_lo, p1 = a m_hi < 2^48;
    high word = (p1 + p0 // 2^16) // 2^16 < 2^32, low word = (p0 + 2^16 (p1 mod 2^16)) mod 2^32.
    Every intermediate stays below 2^50, so int64 arithmetic is exact on every device.
    """
    p0 = a * (m & 0xFFFF)
    p1 = a * (m >> 16)
    hi = (p0 >> 16).add_(p1).bitwise_right_shift_(16)
    lo = p1.bitwise_and_(0xFFFF).bitwise_left_shift_(16).add_(p0).bitwise_and_(MASK32)
    return hi, lo


def split_key(key: int) -> tuple[int, int]:
    """A 64-bit integer key as the two 32-bit words Philox takes (low word first)."""
    key = int(key) % 2**64
    return key & MASK32, key >> 32


def philox(c0, c1, c2, c3, k0, k1, rounds: int = ROUNDS) -> tuple[torch.Tensor, ...]:
    """Philox4x32 on broadcastable int64 tensors of 32-bit words: the four output words.

    ``c0..c3`` is the counter, ``k0, k1`` the key (tensors, or Python ints below 2^32 when one
    of the others is a tensor). The result has the broadcast shape and the tensors' device.
    """
    dev = next((x.device for x in (c0, c1, c2, c3, k0, k1) if isinstance(x, torch.Tensor)), None)
    c0, c1, c2, c3, k0, k1 = (torch.as_tensor(x, dtype=torch.int64, device=dev) for x in (c0, c1, c2, c3, k0, k1))
    # NumPy's rule, the same as torch's (whose broadcast_shapes imports torch.fx's symbolic shapes and sympy: 0.5 s)
    shape = np.broadcast_shapes(*(tuple(x.shape) for x in (c0, c1, c2, c3, k0, k1)))
    c0, c2 = c0.expand(shape), c2.expand(shape)  # the words the products start from: full shape
    for r in range(rounds):
        hi0, lo0 = _mulhilo(c0, _M0)
        hi1, lo1 = _mulhilo(c2, _M1)
        c0, c1, c2, c3 = hi1.bitwise_xor_(c1).bitwise_xor_(k0), lo1, hi0.bitwise_xor_(c3).bitwise_xor_(k1), lo0
        if r + 1 < rounds:
            k0 = (k0 + _W0).bitwise_and_(MASK32)
            k1 = (k1 + _W1).bitwise_and_(MASK32)
    return c0, c1, c2, c3


def pairs(
    k0: torch.Tensor, k1: torch.Tensor, stream: torch.Tensor, start: int, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Values ``start .. start + n - 1`` of N streams of 64-bit random values, as ``(hi, lo)``
    32-bit words, each ``(N, n)`` int64.

    Stream i has key ``(k0[i], k1[i])`` and number ``stream[i]`` (all ``(N,)`` int64 tensors on
    one device); its value j is words 0, 1 (j even) or 2, 3 (j odd) of the Philox counter
    ``(j // 2, stream, 0, 0)``. A value depends on nothing else: not on ``start`` or ``n``, not on
    the other streams asked for with it, not on the device.
    """
    first = start // 2
    half = (start + n + 1) // 2 - first
    c0 = torch.arange(first, first + half, dtype=torch.int64, device=stream.device)[None, :]
    w0, w1, w2, w3 = philox(c0, stream[:, None], 0, 0, k0[:, None], k1[:, None])
    N = stream.shape[0]
    off = start - 2 * first
    hi = torch.stack((w0, w2), dim=-1).reshape(N, 2 * half)[:, off : off + n]
    lo = torch.stack((w1, w3), dim=-1).reshape(N, 2 * half)[:, off : off + n]
    return hi, lo


def bounded(hi: torch.Tensor, lo: torch.Tensor, T: int) -> torch.Tensor:
    """floor(u T / 2^64) for the 64-bit values u = 2^32 hi + lo: integers in [0, T), each with
    probability 1/T up to T 2^-64 (``T < 2^31``). Exact in int64:
    floor(u T / 2^64) = floor((hi T + floor(lo T / 2^32)) / 2^32).

    Raises:
        ValueError: when ``T`` is not in 1 .. 2^31 - 1.
    """
    if not 0 < T < 2**31:
        raise ValueError(f"bounded integers need 0 < T < 2^31, got {T}")
    return ((lo * T) >> 32).add_(hi * T).bitwise_right_shift_(32)


def sort_keys(hi: torch.Tensor, lo: torch.Tensor, position: torch.Tensor, bits: int) -> torch.Tensor:
    """Distinct non-negative int64 sort keys: the top 63 - ``bits`` bits of u, then ``position``
    (< 2^bits) in the low bits, so ties between random parts are broken by position."""
    return ((hi << 31) | (lo >> 1)).bitwise_right_shift_(bits).bitwise_left_shift_(bits).bitwise_or_(position)
