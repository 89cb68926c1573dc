"""Prepared checkouts: a copy per cell that git cannot tell from a fresh clone."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from arenad.materialize import WORK_BRANCH, MaterializeError, WorkspaceTemplates, materialize_git
from tests.materialize.gitrepo import git, make_repo


def _git_view(ws: Path) -> tuple[str, ...]:
    """What an agent (and the patch step) sees of a workspace through git."""
    return (
        git(ws, "rev-parse", "HEAD"),
        git(ws, "rev-parse", "--abbrev-ref", "HEAD"),
        git(ws, "status", "--porcelain"),
        git(ws, "for-each-ref", "--format=%(refname) %(objectname)"),
        git(ws, "config", "--local", "--list"),
        git(ws, "ls-files", "-s"),
        git(ws, "fsck", "--no-progress"),
        git(ws, "rev-list", "--objects", "--all"),
        # Stale stat data lists every tracked file here (and `apply --index` refuses).
        git(ws, "diff-files"),
    )


def _files(root: Path) -> list[Path]:
    """Every path under ``root``, git's included, but for how the objects are stored."""
    return sorted(p.relative_to(root) for p in root.rglob("*") if "objects" not in p.parts)


async def test_a_copy_is_what_a_clone_gives(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    templates = WorkspaceTemplates(tmp_path / "templates")
    copied = await templates.materialize(str(repo.path), repo.first, tmp_path / "a" / "ws")
    cloned = await materialize_git(str(repo.path), repo.first, tmp_path / "b" / "ws")
    assert (copied.head, copied.clean) == (cloned.head, cloned.clean) == (repo.first, True)
    assert copied.workspace == str(tmp_path / "a" / "ws")
    a, b = tmp_path / "a" / "ws", tmp_path / "b" / "ws"
    view = _git_view(a)
    assert view[1] == WORK_BRANCH and view[-1] == ""
    assert view == _git_view(b)
    assert (a / "app.py").read_text() == "v1\n" and not (a / "new.py").exists()
    # Same tree of files, git's included (names only: times and inodes differ), but for
    # git's inert sample hooks and the objects' storage: the template's are one pack.
    assert _files(a) == [p for p in _files(b) if p.suffix != ".sample"]
    assert not list(a.glob(".git/hooks/*.sample")) and list(b.glob(".git/hooks/*.sample"))
    stored = sorted(p.name.rsplit(".", 1)[-1] for p in (a / ".git/objects").rglob("*.*"))
    assert stored == ["idx", "pack"]


async def test_a_copy_has_the_templates_bytes_modes_and_times(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    templates = WorkspaceTemplates(tmp_path / "templates")
    ws = tmp_path / "a" / "ws"
    await templates.materialize(str(repo.path), repo.first, ws)
    (made,) = [d for d in templates.root.iterdir() if d.is_dir()]
    copies = list(ws.rglob("*"))
    assert len(copies) == len(list(made.rglob("*")))
    index = ws / ".git" / "index"
    for copy in copies:
        if copy == index:
            continue  # restamped: the copies' stat data (below)
        original = made / copy.relative_to(ws)
        if copy.is_file():
            assert copy.read_bytes() == original.read_bytes()
        want, got = os.stat(original), os.stat(copy)
        assert (got.st_mode, got.st_mtime_ns) == (want.st_mode, want.st_mtime_ns), copy


async def test_a_copys_index_is_fresh(tmp_path: Path) -> None:
    # Finding 3 (issue 13): a copied workspace's index had the template's stat data, so
    # `git apply --index`/`--3way` refused every tracked file ("does not match index")
    # until `git update-index --refresh`, and a supervisor driver applying its workers'
    # diffs that way delivered nothing.
    repo = make_repo(tmp_path / "src")
    templates = WorkspaceTemplates(tmp_path / "templates")
    ws = tmp_path / "a" / "ws"
    await templates.materialize(str(repo.path), repo.second, ws)
    assert git(ws, "diff-files") == ""
    # git's own refresh finds nothing to change: the bytes stay as the copy made them.
    before = (ws / ".git" / "index").read_bytes()
    git(ws, "update-index", "--refresh")
    assert (ws / ".git" / "index").read_bytes() == before
    # A worker's diff, made in its own clone, applies with --3way and with --index.
    worker = tmp_path / "worker"
    subprocess.run(["git", "clone", "-q", str(ws), str(worker)], check=True)
    (worker / "app.py").write_text("v2\nfixed by a worker\n")
    (worker / "new.py").unlink()
    diff = tmp_path / "w.patch"
    diff.write_text(git(worker, "diff", "HEAD") + "\n")
    git(ws, "apply", "--check", "--index", str(diff))
    git(ws, "apply", "--3way", str(diff))
    assert (ws / "app.py").read_text() == "v2\nfixed by a worker\n"
    assert not (ws / "new.py").exists()


async def test_cells_share_no_object_file(tmp_path: Path) -> None:
    # Finding 5 (issue 13): object files hard-linked between cells (and to the template,
    # and through `clone --local` to the user's repo) let an agent chmod one and rewrite
    # it in place, changing every other cell's base.
    repo = make_repo(tmp_path / "src")
    source_objects = {
        p: p.read_bytes() for p in (repo.path / ".git" / "objects").rglob("*") if p.is_file()
    }
    templates = WorkspaceTemplates(tmp_path / "templates")
    one, two = (tmp_path / "one" / "ws", tmp_path / "two" / "ws")
    await asyncio.gather(
        templates.materialize(str(repo.path), repo.second, one, git_root=tmp_path / "one/git"),
        templates.materialize(str(repo.path), repo.second, two, git_root=tmp_path / "two/git"),
    )
    # Everything a cell or its agent may change is its own.
    (one / "app.py").write_text("changed\n")
    with (one / ".git" / "config").open("a") as config:
        config.write("[user]\n\tname = agent\n")
    with (one / ".git" / "logs" / "HEAD").open("a") as reflog:
        reflog.write("x\n")
    git(one, "add", "-A")
    git(one, "-c", "user.email=a@b", "commit", "-q", "-m", "agent")
    assert git(two, "status", "--porcelain") == ""
    assert "agent" not in (two / ".git" / "config").read_text()
    assert "x\n" not in (two / ".git" / "logs" / "HEAD").read_text()
    assert git(two, "rev-parse", "HEAD") == repo.second
    # The agent of cell one rewrites every object file it has, in place, as its owner may.
    objects = [p for p in (one / ".git" / "objects").rglob("*") if p.is_file()]
    assert objects and all(os.stat(p).st_nlink == 1 for p in objects)
    for path in objects:
        path.chmod(0o644)
        with path.open("r+b") as f:
            size = len(f.read())
            f.seek(0)
            f.write(b"\xff" * size)
    assert git(two, "show", f"{repo.second}:app.py") == "v2"
    assert git(two, "fsck", "--no-progress") == ""
    three = await templates.materialize(str(repo.path), repo.second, tmp_path / "3" / "ws")
    assert three.clean and git(Path(three.workspace), "show", f"{repo.second}:app.py") == "v2"
    assert git(Path(three.workspace), "fsck", "--no-progress") == ""
    assert {p: p.read_bytes() for p in source_objects} == source_objects
    # The sealed roots' objects are links to the template's (hidden from agents), never
    # to a workspace's.
    sealed = [p for p in (tmp_path / "two/git/objects").rglob("*") if p.is_file()]
    workspace_inodes = {os.stat(p).st_ino for p in objects}
    assert sealed and not workspace_inodes & {os.stat(p).st_ino for p in sealed}


async def test_a_failed_template_is_not_kept(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    templates = WorkspaceTemplates(tmp_path / "templates")
    with pytest.raises(MaterializeError) as err:
        await templates.materialize(str(repo.path), "0" * 40, tmp_path / "a" / "ws")
    assert err.value.stage == "reset-fail"
    assert not any((tmp_path / "templates").iterdir())
    ok = await templates.materialize(str(repo.path), repo.first, tmp_path / "b" / "ws")
    assert ok.head == repo.first


async def test_least_recently_used_templates_are_removed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    templates = WorkspaceTemplates(tmp_path / "templates", keep=1)
    await templates.materialize(str(repo.path), repo.first, tmp_path / "a" / "ws")
    await templates.materialize(str(repo.path), repo.second, tmp_path / "b" / "ws")
    assert len(list((tmp_path / "templates").iterdir())) == 1
    again = await templates.materialize(str(repo.path), repo.first, tmp_path / "c" / "ws")
    assert again.head == repo.first and (tmp_path / "c" / "ws" / "app.py").read_text() == "v1\n"
    templates.clear()
    assert not (tmp_path / "templates").exists()
