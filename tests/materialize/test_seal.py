"""A workspace's seal against real git: what it records and what inspect() finds."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest

from arenad.materialize import Seal, WorkspaceTemplates, materialize_git, seal_copy
from arenad.materialize.seal import identity, inspect_dirs
from arenad.verdict.patch import extract_checked
from events.specs import DEFAULT_EXCLUDES
from tests.materialize.gitrepo import Repo, git, make_repo


async def _sealed(tmp_path: Path) -> tuple[Repo, Seal]:
    repo = make_repo(tmp_path / "src")
    templates = WorkspaceTemplates(tmp_path / "templates")
    made = await templates.materialize(
        str(repo.path), repo.first, tmp_path / "run" / "ws", git_root=tmp_path / "git"
    )
    assert made.seal is not None
    return repo, made.seal


async def test_a_seal_records_the_workspace_as_made(tmp_path: Path) -> None:
    repo, seal = await _sealed(tmp_path)
    ws = Path(seal.workspace)
    assert seal.base_tree == git(repo.path, "rev-parse", f"{repo.first}^{{tree}}")
    assert seal.ws_identity == identity(ws) and seal.dotgit_identity == identity(ws / ".git")
    # The root is outside the run dir, and a git dir of its own: no hooks, no
    # config at all (git's defaults and gitsafe's overrides).
    root = Path(seal.root)
    assert not root.is_relative_to(ws.parent)
    assert sorted(p.name for p in root.iterdir()) == ["HEAD", "index", "objects", "refs"]
    assert (root / "index").read_bytes() == (ws / ".git" / "index").read_bytes()
    assert inspect_dirs(seal).evidence == []
    got = await extract_checked(ws, seal.base, [], tmp_path / "p.patch", seal)
    assert got.tampered == [] and got.patch is not None and got.patch.bytes == 0


async def test_an_unchanged_dotgit_keeps_its_identity_a_recreated_one_does_not(
    tmp_path: Path,
) -> None:
    _repo, seal = await _sealed(tmp_path)
    ws = Path(seal.workspace)
    # What an agent may do with its own repository changes nothing the seal looks at.
    git(ws, "config", "user.name", "agent")
    git(ws, "checkout", "-q", "-b", "mine")
    git(ws, "-c", "user.email=a@b", "commit", "-q", "--allow-empty", "-m", "mine")
    assert inspect_dirs(seal).evidence == []
    # rm -rf .git && git init: ext4 hands out the same inode number at once.
    shutil.rmtree(ws / ".git")
    git(ws, "init", "-q")
    seen = inspect_dirs(seal)
    assert seen.workspace_intact
    assert len(seen.evidence) == 1 and seen.evidence[0].startswith("ws/.git replaced (made ")


@pytest.mark.parametrize("how", ["symlink", "recreated"])
async def test_a_replaced_workspace_is_not_read(tmp_path: Path, how: str) -> None:
    _repo, seal = await _sealed(tmp_path)
    ws = Path(seal.workspace)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text("not the agent's\n")
    shutil.move(ws, tmp_path / "old-ws")
    if how == "symlink":
        ws.symlink_to(elsewhere)
    else:
        ws.mkdir()
        (ws / "secret.txt").write_text("not the agent's\n")
    out = tmp_path / "p.patch"
    got = await extract_checked(ws, seal.base, DEFAULT_EXCLUDES, out, seal)
    assert got.patch is None and not out.exists()
    assert got.tampered and got.tampered[0].startswith("workspace dir replaced")


async def test_a_base_that_changed_is_evidence(tmp_path: Path) -> None:
    repo, seal = await _sealed(tmp_path)
    ws = Path(seal.workspace)
    (ws / "app.py").write_text("fixed\n")
    # A tree other than the one recorded (as if the root's objects had been rewritten):
    # evidence; the patch is still taken.
    wrong = msgspec.structs.replace(seal, base_tree=git(repo.path, "rev-parse", "HEAD^{tree}"))
    got = await extract_checked(ws, seal.base, [], tmp_path / "p.patch", wrong)
    assert got.tampered == [f"base commit's tree is {seal.base_tree}, recorded {wrong.base_tree}"]
    assert got.patch is not None and "+fixed" in (tmp_path / "p.patch").read_text()
    # Objects gone: the base is unreadable; the patch cannot be taken, and that is
    # evidence too, never a crash.
    for pack in (Path(seal.root) / "objects" / "pack").iterdir():
        pack.unlink()
    got = await extract_checked(ws, seal.base, [], tmp_path / "q.patch", seal)
    assert got.patch is None and got.tampered is not None and len(got.tampered) == 2
    assert got.tampered[0].startswith(f"base commit {seal.base} unreadable")
    assert got.tampered[1].startswith("no patch: patch-diff: ")


async def test_a_clone_is_sealed_with_copies(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    ws = tmp_path / "run" / "ws"
    await materialize_git(str(repo.path), repo.first, ws)
    seal = await seal_copy(ws, tmp_path / "git", repo.first)
    ours = {os.stat(p).st_ino for p in (ws / ".git" / "objects").rglob("*") if p.is_file()}
    theirs = [p for p in (Path(seal.root) / "objects").rglob("*") if p.is_file()]
    source = {os.stat(p).st_ino for p in (repo.path / ".git" / "objects").rglob("*") if p.is_file()}
    assert theirs and not ours & {os.stat(p).st_ino for p in theirs}
    assert not ours & source  # the clone links nothing of the user's repository either
    (ws / "app.py").write_text("changed\n")
    got = await extract_checked(ws, repo.first, [], tmp_path / "p.patch", seal)
    assert got.tampered == [] and got.patch is not None
    assert "+changed" in (tmp_path / "p.patch").read_text()
    assert subprocess.run(["git", "-C", str(ws), "diff-files", "--quiet"]).returncode == 1


async def test_a_seal_outlives_its_template(tmp_path: Path) -> None:
    # The daemon empties its templates when it stops; a cell verified by the next daemon
    # still has its base (the root's objects are links, not references).
    _repo, seal = await _sealed(tmp_path)
    WorkspaceTemplates(tmp_path / "templates").clear()
    assert not (tmp_path / "templates").exists()
    (Path(seal.workspace) / "app.py").write_text("fixed\n")
    got = await extract_checked(seal.workspace, seal.base, [], tmp_path / "p.patch", seal)
    assert got.tampered == [] and "+fixed" in (tmp_path / "p.patch").read_text()


async def test_base_gitlinks_are_not_the_agents(tmp_path: Path) -> None:
    # A base with a submodule: its index has a gitlink, which the in-process restamp leaves
    # to git's own refresh. Only a nested repository the agent made, or a gitlink it moved,
    # is named; base's own is not.
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q")
    (lib / "x").write_text("x\n")
    git(lib, "add", "-A")
    git(lib, "-c", "user.email=a@b", "commit", "-q", "-m", "x")
    repo = make_repo(tmp_path / "src")
    git(
        repo.path,
        "update-index",
        "--add",
        "--cacheinfo",
        f"160000,{git(lib, 'rev-parse', 'HEAD')},lib",
    )
    git(repo.path, "-c", "user.email=a@b", "commit", "-q", "-m", "with a gitlink")
    base = git(repo.path, "rev-parse", "HEAD")
    templates = WorkspaceTemplates(tmp_path / "templates")
    made = await templates.materialize(
        str(repo.path), base, tmp_path / "run" / "ws", git_root=tmp_path / "git"
    )
    assert made.seal is not None
    ws = Path(made.workspace)
    assert git(ws, "diff-files") == ""  # fresh, by git's refresh this time
    (ws / "app.py").write_text("fixed\n")
    got = await extract_checked(ws, base, [], tmp_path / "p.patch", made.seal)
    assert got.patch is not None and got.patch.nested_repos == []
    nested = ws / "vendored"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "y").write_text("y\n")
    git(nested, "add", "-A")
    git(nested, "-c", "user.email=a@b", "commit", "-q", "-m", "y")
    got = await extract_checked(ws, base, [], tmp_path / "q.patch", made.seal)
    assert got.patch is not None and got.patch.nested_repos == ["vendored"]
    assert "vendored" not in (tmp_path / "q.patch").read_text()
