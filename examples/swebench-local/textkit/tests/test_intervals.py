import pytest
from textkit.intervals import contains, merge, total_length


def test_merge_disjoint_sorted():
    assert merge([(5, 6), (1, 2)]) == [(1, 2), (5, 6)]


def test_merge_overlapping():
    assert merge([(1, 4), (2, 3), (3, 8)]) == [(1, 8)]


def test_merge_empty():
    assert merge([]) == []


def test_merge_rejects_reversed():
    with pytest.raises(ValueError):
        merge([(3, 1)])


# >>> arenad__textkit-2
def test_merge_touching():
    assert merge([(1, 2), (2, 3)]) == [(1, 3)]


def test_total_length_touching():
    assert total_length([(0, 1), (1, 2), (5, 6)]) == 3


# <<< arenad__textkit-2


def test_total_length_overlap_counted_once():
    assert total_length([(0, 2), (1, 3)]) == 3


def test_contains():
    assert contains([(1, 2)], 2)
    assert not contains([(1, 2)], 2.5)
