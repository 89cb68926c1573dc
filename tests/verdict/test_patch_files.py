"""Every file of a patch, read from the diff git really writes (issue 27, finding 11)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from arenad.verdict.patch_files import FILES_KEPT, patch_files

NAMES = [
    "plain.py",
    "with space.txt",
    "résumé.md",
    'quo"te.txt',
    "back\\slash.txt",
    "tab\there.txt",
    "dir/sub/deep.py",
    "empty-new.txt",
    "image.bin",
]


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "core.quotepath=true", *args],
        check=True,
        capture_output=True,
    ).stdout


def test_the_files_and_their_sections_are_the_diffs(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "old-name.txt").write_text("moved\n" * 20)
    (repo / "gone.txt").write_text("bye\n")
    (repo / "mode.sh").write_text("echo\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    for name in NAMES:
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name == "empty-new.txt":
            path.write_bytes(b"")
        elif name == "image.bin":
            path.write_bytes(bytes(range(256)) * 4)
        else:
            path.write_text(f"{name}\n")
    with open(bytes(repo) + b"/bad-\xff.txt", "wb") as f:  # a name that is not UTF-8
        f.write(b"?\n")
    (repo / "old-name.txt").rename(repo / "new-name.txt")
    (repo / "gone.txt").unlink()
    (repo / "mode.sh").chmod(0o755)
    _git(repo, "add", "-A")
    data = _git(repo, "diff", "--cached", "-M", "HEAD")
    files, omitted = patch_files(data)
    expected = sorted([*NAMES, "new-name.txt", "gone.txt", "mode.sh", "bad-\\xff.txt"])
    assert sorted(f.path for f in files) == expected and omitted == 0
    # Each section's bytes: the sizes add up to the whole patch.
    assert sum(f.size for f in files) == len(data)


def test_a_junk_file_that_sorts_first_cannot_hide_the_real_change(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    (repo / "0000-junk.txt").write_text("x" * 80 + "\n" * 1 + ("y" * 80 + "\n") * 20_000)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    _git(repo, "add", "-A")
    data = _git(repo, "diff", "--cached", "HEAD")
    files, _ = patch_files(data)
    assert [f.path for f in files] == ["0000-junk.txt", "calc.py"]
    assert files[0].size > 512 * 1024 and files[1].size < 1024


def test_the_list_is_bounded_and_counts_the_rest() -> None:
    one = b"diff --git a/f%d b/f%d\nnew file mode 100644\n"
    data = b"".join(one % (i, i) for i in range(FILES_KEPT + 7))
    files, omitted = patch_files(data)
    assert len(files) == FILES_KEPT and omitted == 7
    assert files[0].path == "f0" and files[-1].path == f"f{FILES_KEPT - 1}"
    assert patch_files(b"") == ([], 0)
