"""arenad.verdict.patch against a real workspace."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from arenad.verdict.patch import diff_argv, extract_patch, patch_line_count
from events.specs import DEFAULT_EXCLUDES
from tests.materialize.gitrepo import git, make_repo

EXCLUDED = [
    "tests/test_app.py",
    "pkg/tests/helper.py",
    "pkg/test/data.txt",
    "test_top.py",
    "pkg/test_mod.py",
    "thing_test.py",
    "pkg/thing_test.py",
    "conftest.py",
    "pkg/conftest.py",
    ".loops/supervisor/state.json",
    "pkg/.loops/x.json",
]


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def test_excludes_keep_tests_and_loops_out(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    ws = repo.path
    git(ws, "checkout", "-q", repo.first)
    _write(ws, "app.py", "v1\nfixed\n")
    _write(ws, "pkg/impl.py", "code\n")
    _write(ws, "pkg/testing_utils.py", "not a test file by the patterns\n")
    for rel in EXCLUDED:
        _write(ws, rel, "excluded\n")
    out = tmp_path / "patches" / "iid.solo.patch"
    result = await extract_patch(ws, repo.first, DEFAULT_EXCLUDES, out)
    patch = out.read_text()
    changed = [line[len("+++ b/") :] for line in patch.splitlines() if line.startswith("+++ b/")]
    assert sorted(changed) == ["app.py", "pkg/impl.py", "pkg/testing_utils.py"]
    assert result.lines == len(patch.splitlines()) == patch_line_count(patch)
    assert result.sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    assert result.bytes == out.stat().st_size and result.path == str(out)
    assert not out.with_name(out.name + ".partial").exists()
    # The patch's text comes back too, for the log: whole, as it is small.
    assert result.excerpt is not None and result.excerpt.text == patch
    assert (result.excerpt.sha256, result.excerpt.cut) == (result.sha256, "none")

    # The patch applies to a fresh checkout of base.
    fresh = tmp_path / "fresh"
    subprocess.run(["git", "clone", "-q", str(ws), str(fresh)], check=True)
    git(fresh, "checkout", "-q", repo.first)
    git(fresh, "apply", "--check", str(out))


async def test_diff_is_against_base_not_head(tmp_path: Path) -> None:
    # HEAD is on the second commit: the patch must still carry it relative to the first.
    repo = make_repo(tmp_path / "ws")
    out = tmp_path / "p.patch"
    result = await extract_patch(repo.path, repo.first, DEFAULT_EXCLUDES, out)
    text = out.read_text()
    assert "+v2" in text and "+++ b/new.py" in text
    assert result.lines > 0


async def test_a_long_patch_comes_back_bounded(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    _write(repo.path, "big.txt", "x" * 5000 + "\n")
    out = tmp_path / "p.patch"
    result = await extract_patch(repo.path, repo.first, DEFAULT_EXCLUDES, out, keep_bytes=100)
    assert result.excerpt is not None
    assert result.excerpt.text == out.read_text()[:100] and result.excerpt.cut == "head"
    assert (result.excerpt.size, result.excerpt.sha256) == (result.bytes, result.sha256)


async def test_empty_patch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    out = tmp_path / "p.patch"
    result = await extract_patch(repo.path, repo.second, DEFAULT_EXCLUDES, out)
    assert out.read_bytes() == b""
    assert result.lines == 0 and result.sha256 == hashlib.sha256(b"").hexdigest()


def test_diff_argv_is_the_seeds() -> None:
    assert diff_argv("/ws", "abc", ["**/tests/**", ":(exclude)already"]) == [
        "git",
        "-C",
        "/ws",
        "diff",
        "--cached",
        "abc",
        "--",
        ".",
        ":(exclude,glob)**/tests/**",
        ":(exclude)already",
        ":(exclude,glob).loops/**",
        ":(exclude,glob)**/.loops/**",
    ]


def test_patch_line_count() -> None:
    assert patch_line_count("") == 0
    assert patch_line_count("a") == 1
    assert patch_line_count("a\n") == 1
    assert patch_line_count("a\nb") == 2
    assert patch_line_count("a\n\n") == 2
    assert patch_line_count(b"a\nb\n") == 2
