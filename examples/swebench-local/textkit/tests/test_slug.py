from textkit.slug import slugify


def test_basic():
    assert slugify("Hello, World!") == "hello-world"


def test_accents_dropped():
    assert slugify("Crème brûlée") == "creme-brulee"


def test_separator():
    assert slugify("a b c", separator="_") == "a_b_c"


def test_max_length_cuts_at_word():
    assert slugify("the quick brown fox", max_length=12) == "the-quick"


def test_max_length_exact_word_end():
    assert slugify("the quick brown", max_length=9) == "the-quick"
