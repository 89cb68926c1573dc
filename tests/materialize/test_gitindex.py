"""arenad.materialize.gitindex against index files real git wrote."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from arenad.materialize import gitindex
from tests.materialize.gitrepo import git, make_repo


def _copy(src: Path, dst: Path) -> Path:
    """A copy with new inodes and ctimes (mtimes kept): every entry's stat data is stale."""
    shutil.copytree(src, dst, symlinks=True)
    return dst


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_a_restamped_index_is_what_gits_refresh_leaves(tmp_path: Path, version: str) -> None:
    repo = make_repo(tmp_path / "src")
    (repo.path / "deep" / "er").mkdir(parents=True)
    (repo.path / "deep" / "er" / ("long" * 40 + ".py")).write_text("x\n")  # path compression
    (repo.path / "link").symlink_to("app.py")
    git(repo.path, "add", "-A")
    git(repo.path, "-c", "user.email=a@b", "commit", "-q", "-m", "more")
    git(repo.path, "update-index", "--index-version", version)
    ours = _copy(repo.path, tmp_path / "ours")
    theirs = _copy(repo.path, tmp_path / "theirs")
    assert git(ours, "diff-files") != ""  # stale

    written = gitindex.restamp(ours / ".git" / "index", ours)

    assert written == (ours / ".git" / "index").read_bytes()
    assert git(ours, "diff-files") == ""
    git(theirs, "update-index", "-q", "--refresh")
    # Entry for entry what git's refresh records, but for what differs between two copies.
    assert _debug(ours, keep_own=False) == _debug(theirs, keep_own=False)
    # And those are the files' own.
    for path, fields in _debug(ours, keep_own=True).items():
        st = (ours / path).lstat()
        assert fields["ctime"] == f"{int(st.st_ctime)}:{st.st_ctime_ns % 10**9}"
        assert fields["ino"] == str(st.st_ino & 0xFFFFFFFF)
    # git agrees: its own refresh has nothing left to do.
    before = (ours / ".git" / "index").read_bytes()
    git(ours, "update-index", "--refresh")
    assert (ours / ".git" / "index").read_bytes() == before
    assert git(ours, "fsck", "--no-progress") == ""


def _debug(ws: Path, *, keep_own: bool) -> dict[str, dict[str, str]]:
    """``ls-files --debug``: path -> stat fields (ctime, dev and ino only if ``keep_own``)."""
    out: dict[str, dict[str, str]] = {}
    fields: dict[str, str] = {}
    for line in git(ws, "ls-files", "--debug").splitlines():
        if not line.startswith(" "):
            fields = out.setdefault(line, {})
            continue
        for part in line.strip().split("\t"):
            key, _, value = part.partition(": ")
            if keep_own or key not in ("ctime", "dev", "ino"):
                fields[key] = value
    return out


def test_gitlinks_are_listed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    sub = repo.path / "vendor" / "lib"
    sub.mkdir(parents=True)
    git(sub, "init", "-q")
    (sub / "x").write_text("x\n")
    git(sub, "add", "-A")
    git(sub, "-c", "user.email=a@b", "commit", "-q", "-m", "x")
    head = git(sub, "rev-parse", "HEAD")
    git(repo.path, "add", "-A")
    assert gitindex.gitlinks(repo.path / ".git" / "index") == {"vendor/lib": head}
    # A gitlink's stat data is not a file's: restamping refuses rather than guesses.
    with pytest.raises(gitindex.IndexFormatError):
        gitindex.restamp(repo.path / ".git" / "index", repo.path)


def test_what_it_does_not_handle_is_refused_untouched(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    git(repo.path, "update-index", "--split-index")
    index = repo.path / ".git" / "index"
    before = index.read_bytes()
    with pytest.raises(gitindex.IndexFormatError):
        gitindex.restamp(index, repo.path)
    assert index.read_bytes() == before
    index.write_bytes(before[:-1] + bytes([before[-1] ^ 1]))
    with pytest.raises(gitindex.IndexFormatError, match="checksum"):
        gitindex.gitlinks(index)
    # A file that became a directory is not stamped as the file it was.
    plain = make_repo(tmp_path / "plain")
    (plain.path / "app.py").unlink()
    (plain.path / "app.py").mkdir()
    with pytest.raises(gitindex.IndexFormatError, match="changed type"):
        gitindex.restamp(plain.path / ".git" / "index", plain.path)
    assert (
        subprocess.run(["git", "-C", str(plain.path), "status"], capture_output=True).returncode
        == 0
    )
