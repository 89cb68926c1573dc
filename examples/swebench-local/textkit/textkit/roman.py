"""Roman numerals, 1..3999."""

_NUMERALS = [
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
]
_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(number: int) -> str:
    """``number`` as a Roman numeral; ValueError outside 1..3999."""
    if not isinstance(number, int) or isinstance(number, bool):
        raise TypeError("to_roman takes an int")
    if not 0 < number < 4000:
        raise ValueError(f"{number} is outside 1..3999")
    out = []
    for value, letters in _NUMERALS:
        count, number = divmod(number, value)
        out.append(letters * count)
    return "".join(out)


def from_roman(text: str) -> int:
    """The value of a Roman numeral (upper or lower case); ValueError if it is not one."""
    text = text.strip().upper()
    if not text or any(ch not in _VALUES for ch in text):
        raise ValueError(f"{text!r} is not a Roman numeral")
    total = 0
    for i, ch in enumerate(text):
        value = _VALUES[ch]
        if i + 1 < len(text) and _VALUES[text[i + 1]] > value:
            total -= value
        else:
            total += value
    if to_roman(total) != text:
        raise ValueError(f"{text!r} is not a canonical Roman numeral")
    return total
