"""URL slugs."""

import re
import unicodedata

_NOT_WORD = re.compile(r"[^a-z0-9]+")


def slugify(text: str, *, max_length: int | None = None, separator: str = "-") -> str:
    """Lower-case ASCII words of ``text`` joined by ``separator``; accents are dropped
    (é -> e), everything else that is not a letter or digit separates words. A
    ``max_length`` cuts at a word boundary when it can."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    words = [w for w in _NOT_WORD.split(ascii_text.lower()) if w]
    slug = separator.join(words)
    if max_length is not None and len(slug) > max_length:
        cut = slug[:max_length]
        if separator in cut and slug[max_length : max_length + len(separator)] != separator:
            cut = cut.rsplit(separator, 1)[0]
        slug = cut.strip(separator)
    return slug
