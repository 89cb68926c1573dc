import pytest
from textkit.wrap import wrap


def test_wrap_basic():
    assert wrap("the quick brown fox jumps", 10) == ["the quick", "brown fox", "jumps"]


def test_wrap_long_word():
    assert wrap("a extraordinarily b", 5) == ["a", "extraordinarily", "b"]


def test_wrap_collapses_space():
    assert wrap("  a   b  ", 10) == ["a b"]


def test_wrap_bad_width():
    with pytest.raises(ValueError):
        wrap("x", 0)
