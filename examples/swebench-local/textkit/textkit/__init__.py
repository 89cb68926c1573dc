"""textkit: small, dependency-free text and number helpers."""

from textkit.intervals import merge, total_length
from textkit.roman import from_roman, to_roman
from textkit.slug import slugify
from textkit.stats import mean, median, mode
from textkit.wrap import wrap

__all__ = [
    "from_roman",
    "mean",
    "median",
    "merge",
    "mode",
    "slugify",
    "to_roman",
    "total_length",
    "wrap",
]
