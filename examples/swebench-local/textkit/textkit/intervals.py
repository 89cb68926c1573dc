"""Closed intervals of numbers: [start, end] with start <= end."""

from collections.abc import Iterable


def merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of ``intervals`` as sorted, disjoint intervals. Intervals that overlap or
    touch (one ends where the next starts) become one."""
    ordered = sorted(intervals)
    for start, end in ordered:
        if start > end:
            raise ValueError(f"interval ({start}, {end}) ends before it starts")
    merged: list[tuple[float, float]] = []
    for start, end in ordered:
        if merged and start <= merged[-1][1]:
            last_start, last_end = merged[-1]
            merged[-1] = (last_start, max(last_end, end))
        else:
            merged.append((start, end))
    return merged


def total_length(intervals: Iterable[tuple[float, float]]) -> float:
    """How much of the line ``intervals`` cover (overlaps counted once)."""
    return sum(end - start for start, end in merge(intervals))


def contains(intervals: Iterable[tuple[float, float]], point: float) -> bool:
    """Whether ``point`` lies in one of ``intervals`` (ends included)."""
    return any(start <= point <= end for start, end in intervals)
