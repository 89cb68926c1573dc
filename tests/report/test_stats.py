"""The report's statistics against values worked out by hand (and published vectors)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arenad.report.stats import (
    Z95,
    SplitMix64,
    bootstrap_mean_ci,
    mcnemar_exact,
    median,
    normal_mean_ci,
    pass_at_k,
    quantile,
    wilson,
)


def test_wilson_five_of_seven() -> None:
    # p = 5/7 = 0.714286, n = 7, z = 1.959964, z^2 = 3.841459
    # denom  = 1 + z^2/n                          = 1.548780
    # center = (p + z^2/(2n)) / denom             = (0.714286 + 0.274390) / 1.548780 = 0.638357
    # half   = z sqrt(p(1-p)/n + z^2/(4n^2)) / denom
    #        = 1.959964 sqrt(0.029155 + 0.019599) / 1.548780 = 0.279424
    # -> [0.358934, 0.917781] (to six places; the rounded steps above give 0.358933)
    lo, hi = wilson(5, 7) or (0, 0)
    assert lo == pytest.approx(0.358934, abs=1e-6)
    assert hi == pytest.approx(0.917781, abs=1e-6)


def test_wilson_two_of_eight() -> None:
    # p = 0.25, n = 8: denom = 1.480182, center = 0.490091 / 1.480182 = 0.331102,
    # half = 1.959964 sqrt(0.0234375 + 0.0150057) / 1.480182 = 0.259622 -> [0.071480, 0.590724]
    lo, hi = wilson(2, 8) or (0, 0)
    assert lo == pytest.approx(0.071479, abs=1e-6)
    assert hi == pytest.approx(0.590725, abs=1e-6)


def test_wilson_edges_are_exact_and_no_trials_is_unknown() -> None:
    # 0/n: center = half, so the lower bound is 0 exactly; upper = (z^2/n) / (1 + z^2/n).
    z2 = Z95 * Z95
    assert wilson(0, 4) == (0.0, pytest.approx((z2 / 4) / (1 + z2 / 4)))
    lo, hi = wilson(4, 4) or (0, 0)
    assert hi == 1.0 and lo == pytest.approx(1 - (z2 / 4) / (1 + z2 / 4))
    assert wilson(0, 0) is None
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    # n = 5 samples, c = 2 successes: pass@1 = c/n = 0.4;
    # pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7; pass@4 = 1 - C(3,4)/C(5,4) = 1 - 0 = 1.
    assert pass_at_k(5, 2, 1) == 0.4
    assert pass_at_k(5, 2, 2) == 0.7
    assert pass_at_k(5, 2, 4) == 1.0
    assert pass_at_k(3, 0, 3) == 0.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_mcnemar_exact_two_sided() -> None:
    # b = 3, c = 1: n = 4, P[X <= 1] = (C(4,0) + C(4,1)) / 16 = 5/16; two-sided = 10/16.
    assert mcnemar_exact(3, 1) == 0.625
    assert mcnemar_exact(1, 3) == 0.625
    # b = 6, c = 0: 2 / 64.
    assert mcnemar_exact(6, 0) == 2 / 64
    # b = c: the two tails overlap at the middle; the p-value is capped at 1.
    assert mcnemar_exact(2, 2) == 1.0
    # b = 10, c = 2: (1 + 12 + 66) / 4096 * 2 = 158 / 4096.
    assert mcnemar_exact(10, 2) == 158 / 4096
    assert mcnemar_exact(0, 0) is None


def test_quantiles_interpolate_between_order_statistics() -> None:
    walls = [10.0, 20.0, 30.0, 100.0, 40.0, 50.0, 60.0, 70.0]
    # Sorted: 10 20 30 40 50 60 70 100. Median: (40 + 50) / 2.
    assert median(walls) == 45.0
    # p90: position 0.9 * 7 = 6.3 -> 70 + 0.3 * (100 - 70) = 79.
    assert quantile(walls, 0.9) == pytest.approx(79.0)
    assert median([3.0]) == 3.0
    assert median([]) is None


def test_splitmix64_matches_the_published_sequence() -> None:
    # The reference sequence for seed 1234567 (Vigna's splitmix64.c; Rosetta Code).
    rng = SplitMix64(1234567)
    assert [rng.next() for _ in range(5)] == [
        0x599ED017FB08FC85,
        0x2C73F08458540FA5,
        0x883EBCE5A3F27C77,
        0x3FBEF740E9177B3F,
        0xE3B8346708CB5ECD,
    ]


def test_indices_are_the_halves_of_the_outputs() -> None:
    # With n = 2**32 nothing is rejected and nothing is reduced: high half, then low half.
    assert SplitMix64(1234567).indices(2**32, 3) == [0x599ED017, 0xFB08FC85, 0x2C73F084]
    # n = 3: limit = 2**32 - 1 (2**32 % 3 == 1); 0x599ED017 % 3 = 1, 0xFB08FC85 % 3 = 1.
    assert SplitMix64(1234567).indices(3, 2) == [0x599ED017 % 3, 0xFB08FC85 % 3]


@given(st.integers(min_value=0, max_value=2**64 - 1), st.integers(min_value=1, max_value=1000))
def test_indices_stay_in_range(seed: int, n: int) -> None:
    drawn = SplitMix64(seed).indices(n, 21)
    assert len(drawn) == 21 and all(0 <= i < n for i in drawn)


def test_bootstrap_is_deterministic_and_brackets_the_mean() -> None:
    diffs = [0.5, -0.5, 1.0, 1.0]
    first = bootstrap_mean_ci(diffs, resamples=500, seed=7)
    assert first == bootstrap_mean_ci(diffs, resamples=500, seed=7)
    assert first is not None
    lo, hi = first
    # Every resampled mean lies within [min, max] of the values; the mean 0.5 inside.
    assert -0.5 <= lo <= 0.5 <= hi <= 1.0
    assert bootstrap_mean_ci([0.25] * 3, resamples=50, seed=1) == (0.25, 0.25)
    assert bootstrap_mean_ci([], resamples=50, seed=1) is None


def test_bootstrap_interval_approaches_the_normal_one() -> None:
    # 0/1 differences, half ones: the mean's sd is sqrt(0.25 / 200) = 0.0354, so the 95 %
    # interval is about 0.5 +- 0.069; 2000 resamples land within a few thousandths.
    values = [float(i % 2) for i in range(200)]
    lo, hi = bootstrap_mean_ci(values, resamples=2000, seed=3) or (0, 0)
    half = Z95 * math.sqrt(0.25 / 200)
    assert lo == pytest.approx(0.5 - half, abs=0.01)
    assert hi == pytest.approx(0.5 + half, abs=0.01)
    # What the report gives past BOOTSTRAP_MAX_INSTANCES: that interval, computed.
    assert normal_mean_ci(values) == pytest.approx((0.5 - half, 0.5 + half), abs=1e-12)
    assert normal_mean_ci([0.25] * 3) == (0.25, 0.25)
    assert normal_mean_ci([]) is None


def test_the_normal_interval_stands_in_for_the_bootstrap_at_many_instances() -> None:
    # Resolve fractions' differences in {-1, -0.5, 0, 0.5, 1}, skewed, over 1000 instances.
    values = [
        (-1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 1.0)[(i * 7) % 7 if i % 3 else i % 7] for i in range(1000)
    ]
    boot = bootstrap_mean_ci(values, resamples=2000, seed=11)
    normal = normal_mean_ci(values)
    assert boot is not None and normal is not None
    assert boot == pytest.approx(normal, abs=0.005)
