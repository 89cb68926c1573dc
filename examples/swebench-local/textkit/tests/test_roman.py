import pytest
from textkit.roman import from_roman, to_roman


@pytest.mark.parametrize(
    ("number", "numeral"),
    [(1, "I"), (3, "III"), (5, "V"), (10, "X"), (58, "LVIII"), (3888, "MMMDCCCLXXXVIII")],
)
def test_to_roman_additive(number, numeral):
    assert to_roman(number) == numeral


def test_to_roman_rejects_zero_and_large():
    with pytest.raises(ValueError):
        to_roman(0)
    with pytest.raises(ValueError):
        to_roman(4000)


def test_to_roman_rejects_bool():
    with pytest.raises(TypeError):
        to_roman(True)


# >>> arenad__textkit-1
def test_to_roman_subtractive():
    assert to_roman(4) == "IV"
    assert to_roman(9) == "IX"
    assert to_roman(40) == "XL"
    assert to_roman(1994) == "MCMXCIV"


def test_roundtrip_all():
    for n in range(1, 4000):
        assert from_roman(to_roman(n)) == n


# <<< arenad__textkit-1


def test_from_roman_lower_case():
    assert from_roman("xiii") == 13


def test_from_roman_rejects_garbage():
    with pytest.raises(ValueError):
        from_roman("ABC")
    with pytest.raises(ValueError):
        from_roman("")
