"""The report's statistics: pure functions of counts and numbers.

No clock, no I/O, no ``random``: the bootstrap draws from ``SplitMix64``, a PRNG written
here, so a fixed seed gives the same interval on every machine and Python version (the
stdlib's generator is allowed to change between releases). Every figure that has no data
behind it is ``None`` (unknown), never 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "Z95",
    "SplitMix64",
    "bootstrap_mean_ci",
    "mcnemar_exact",
    "median",
    "normal_mean_ci",
    "pass_at_k",
    "quantile",
    "wilson",
    "wilson_rate",
]

# The standard normal's 97.5th percentile: a two-sided 95 % interval.
Z95 = 1.959963984540054

_MASK64 = (1 << 64) - 1


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a binomial proportion; None without trials.

    Unlike the normal (Wald) interval it stays inside [0, 1] and does not collapse to a
    point at 0/n or n/n, which is where small arenas live.
    """
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} outside 0..{n}")
    if n == 0:
        return None
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # The bounds are exactly 0 and 1 at the edges; rounding must not move them past.
    lo = 0.0 if successes == 0 else max(0.0, center - half)
    hi = 1.0 if successes == n else min(1.0, center + half)
    return lo, hi


def wilson_rate(p: float, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson's interval of a rate ``p`` observed over ``n`` effective trials (``n`` need
    not divide the successes: a clustered rate with n = the clusters); None without
    trials. Equals ``wilson(round(p * n), n)`` when p * n is whole."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"rate {p} outside [0, 1]")
    if n <= 0:
        return None
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    lo = 0.0 if p == 0.0 else max(0.0, center - half)
    hi = 1.0 if p == 1.0 else min(1.0, center + half)
    return lo, hi


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one instance with ``c`` successes in ``n`` samples:
    1 - C(n-c, k) / C(n, k), the chance that k draws without replacement hit a success.
    Computed on exact integers, so the one division is correctly rounded."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n and 0 <= c <= n (n={n}, c={c})")
    total = math.comb(n, k)
    return (total - math.comb(n - c, k)) / total


def mcnemar_exact(b: int, c: int) -> float | None:
    """McNemar's exact two-sided p-value on the discordant counts ``b`` and ``c``: under
    the null each discordant pair goes either way with probability 1/2, so it is the
    two-sided binomial test min(1, 2 * P[X <= min(b, c)]), X ~ Binomial(b + c, 1/2).
    None when there is no discordant pair (no evidence either way, not p = 1 by fiat)."""
    if b < 0 or c < 0:
        raise ValueError(f"negative discordant count ({b}, {c})")
    n = b + c
    if n == 0:
        return None
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    # Integer numerator over a power of two: exact up to the final rounding.
    return min(1.0, (2 * tail) / (1 << n))


def quantile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile by linear interpolation between order statistics (Hyndman & Fan
    type 7, numpy's default); None for no values."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside [0, 1]")
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    frac = pos - lo
    return ordered[lo] + (ordered[hi] - ordered[lo]) * frac


def median(values: Sequence[float]) -> float | None:
    return quantile(values, 0.5)


class SplitMix64:
    """Vigna's SplitMix64: a 64-bit state stepped by the golden-ratio constant and mixed.
    Small, fast in pure Python, and fully specified, so a seed means the same stream
    everywhere."""

    def __init__(self, seed: int) -> None:
        self._state = seed & _MASK64

    def next(self) -> int:
        self._state = (self._state + 0x9E3779B97F4A7C15) & _MASK64
        z = self._state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)

    def indices(self, n: int, count: int) -> list[int]:
        """``count`` uniform integers in [0, n), n <= 2**32. Each 64-bit output gives two
        32-bit draws (high half first), and a draw at or above the last whole multiple of n
        is rejected, so no index is favoured by the modulo. Python's integers make each
        output cost a few big multiplications; halving them halves the bootstrap's time."""
        if not 1 <= n <= 1 << 32:
            raise ValueError(f"bound {n} outside 1..2**32")
        limit = (1 << 32) - (1 << 32) % n
        state = self._state
        out: list[int] = []
        append = out.append
        while len(out) < count:
            state = (state + 0x9E3779B97F4A7C15) & _MASK64
            z = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
            z ^= z >> 31
            high, low = z >> 32, z & 0xFFFFFFFF
            if high < limit:
                append(high % n)
            if low < limit and len(out) < count:
                append(low % n)
        self._state = state
        return out


def bootstrap_mean_ci(
    values: Sequence[float], *, resamples: int, seed: int, level: float = 0.95
) -> tuple[float, float] | None:
    """The percentile bootstrap interval of the mean of ``values``: ``resamples`` means of
    len(values) draws with replacement, cut at (1 - level)/2 and (1 + level)/2 by
    ``quantile``. None for no values."""
    if resamples < 1:
        raise ValueError(f"resamples {resamples} < 1")
    n = len(values)
    if n == 0:
        return None
    rng = SplitMix64(seed)
    means = []
    for _ in range(resamples):
        means.append(sum([values[i] for i in rng.indices(n, n)]) / n)
    tail = (1.0 - level) / 2
    lo, hi = quantile(means, tail), quantile(means, 1.0 - tail)
    assert lo is not None and hi is not None
    return lo, hi


def normal_mean_ci(values: Sequence[float], *, z: float = Z95) -> tuple[float, float] | None:
    """The interval the percentile bootstrap of the mean tends to for many values: the mean
    ± z·σ/√n, σ the values' own (plug-in) standard deviation, which is the spread of a
    resampled mean. None for no values. O(n), where the bootstrap is O(resamples × n)."""
    n = len(values)
    if n == 0:
        return None
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / n)
    half = z * sd / math.sqrt(n)
    return mean - half, mean + half
