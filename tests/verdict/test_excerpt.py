"""arenad.verdict.excerpt: bounded pieces of files, cut on character boundaries."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from arenad.verdict.excerpt import file_tail_excerpt, head_excerpt, tail_excerpt


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_short_file_is_kept_whole() -> None:
    data = "diff --git a/é b/é\n".encode()
    e = head_excerpt(data, 1000)
    assert (e.text, e.encoding, e.cut) == (data.decode(), "utf-8", "none")
    assert (e.kept_bytes, e.size, e.sha256) == (len(data), len(data), sha(data))


def test_the_head_ends_on_a_whole_character() -> None:
    data = "ab" + "é" * 10  # é is two bytes: a cut at 5 falls inside the second one
    raw = data.encode()
    e = head_excerpt(raw, 5)
    assert (e.text, e.kept_bytes, e.cut, e.encoding) == ("abé", 4, "head", "utf-8")
    assert (e.size, e.sha256) == (len(raw), sha(raw))


def test_the_tail_starts_on_a_whole_character() -> None:
    raw = ("é" * 10 + "ok").encode()
    e = tail_excerpt(raw, len(raw), sha(raw), 5)
    assert (e.text, e.kept_bytes, e.cut) == ("éok", 4, "tail")


def test_bytes_that_are_not_utf8_are_kept_as_base64() -> None:
    raw = b"caf\xe9 latin-1\n" * 3
    e = head_excerpt(raw, 20)
    assert e.encoding == "base64" and base64.b64decode(e.text) == raw[:20]
    assert e.kept_bytes == 20 and e.cut == "head"


def test_a_file_tail_hashes_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "verify.log"
    raw = b"".join(f"line {i}\n".encode() for i in range(300_000))
    path.write_bytes(raw)
    e = file_tail_excerpt(path, 100)
    assert e.text == raw[-100:].decode() and e.cut == "tail"
    assert (e.size, e.sha256) == (len(raw), sha(raw))
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert file_tail_excerpt(empty, 100).cut == "none"
