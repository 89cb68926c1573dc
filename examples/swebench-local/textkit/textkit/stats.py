"""Descriptive statistics of a non-empty sequence of numbers."""

from collections import Counter
from collections.abc import Sequence


def _checked(values: Sequence[float], what: str) -> list[float]:
    data = list(values)
    if not data:
        raise ValueError(f"{what} of an empty sequence")
    return data


def mean(values: Sequence[float]) -> float:
    data = _checked(values, "mean")
    return sum(data) / len(data)


def median(values: Sequence[float]) -> float:
    """The middle value; for an even count, the mean of the two middle values."""
    data = sorted(_checked(values, "median"))
    mid = len(data) // 2
    if len(data) % 2:
        return data[mid]
    return (data[mid - 1] + data[mid]) / 2


def mode(values: Sequence[float]) -> float:
    """The most common value; among equally common ones, the smallest."""
    counts = Counter(_checked(values, "mode"))
    best = max(counts.values())
    return min(v for v, c in counts.items() if c == best)


def variance(values: Sequence[float]) -> float:
    """The population variance."""
    data = _checked(values, "variance")
    m = mean(data)
    return sum((x - m) ** 2 for x in data) / len(data)
