import pytest
from textkit.stats import mean, median, mode, variance


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_median_odd():
    assert median([3, 1, 2]) == 2


# >>> arenad__textkit-3
def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5
    assert median([1, 10]) == 5.5


# <<< arenad__textkit-3


def test_mode_ties_smallest():
    assert mode([3, 1, 3, 1, 2]) == 1


def test_variance():
    assert variance([1, 2, 3, 4]) == 1.25


@pytest.mark.parametrize("fn", [mean, median, mode, variance])
def test_empty_raises(fn):
    with pytest.raises(ValueError):
        fn([])
