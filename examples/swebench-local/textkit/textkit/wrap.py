"""Greedy word wrapping."""


def wrap(text: str, width: int) -> list[str]:
    """``text``'s words in lines of at most ``width`` characters (a longer word gets a line
    of its own). Whitespace runs collapse to one space."""
    if width < 1:
        raise ValueError("width must be at least 1")
    lines: list[str] = []
    current = ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines
