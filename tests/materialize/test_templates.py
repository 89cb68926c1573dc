"""Prepared checkouts: a copy per cell that git cannot tell from a fresh clone."""

from __future__ import annotations

import asyncio
import os
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
    )


async def test_a_copy_is_what_a_clone_gives(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    templates = WorkspaceTemplates(tmp_path / "templates")
    copied = await templates.materialize(str(repo.path), repo.first, tmp_path / "a" / "ws")
    cloned = await materialize_git(str(repo.path), repo.first, tmp_path / "b" / "ws")
    assert (copied.head, copied.clean) == (cloned.head, cloned.clean) == (repo.first, True)
    assert copied.workspace == str(tmp_path / "a" / "ws")
    a, b = tmp_path / "a" / "ws", tmp_path / "b" / "ws"
    view = _git_view(a)
    assert view[1] == WORK_BRANCH
    assert view == _git_view(b)
    assert (a / "app.py").read_text() == "v1\n" and not (a / "new.py").exists()
    # Same tree of files, git's included (names only: times and inodes differ), but for
    # git's inert sample hooks.
    assert sorted(p.relative_to(a) for p in a.rglob("*")) == sorted(
        p.relative_to(b) for p in b.rglob("*") if p.suffix != ".sample"
    )
    assert not list(a.glob(".git/hooks/*.sample")) and list(b.glob(".git/hooks/*.sample"))


async def test_a_copy_has_the_templates_bytes_modes_and_times(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    templates = WorkspaceTemplates(tmp_path / "templates")
    ws = tmp_path / "a" / "ws"
    await templates.materialize(str(repo.path), repo.first, ws)
    (made,) = [d for d in templates.root.iterdir() if d.is_dir()]
    copies = list(ws.rglob("*"))
    assert len(copies) == len(list(made.rglob("*")))
    for copy in copies:
        original = made / copy.relative_to(ws)
        if copy.is_file():
            assert copy.read_bytes() == original.read_bytes()
        want, got = os.stat(original), os.stat(copy)
        assert (got.st_mode, got.st_mtime_ns) == (want.st_mode, want.st_mtime_ns), copy


async def test_cells_share_objects_but_nothing_else(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    templates = WorkspaceTemplates(tmp_path / "templates")
    one, two = (tmp_path / "one" / "ws", tmp_path / "two" / "ws")
    await asyncio.gather(
        templates.materialize(str(repo.path), repo.second, one),
        templates.materialize(str(repo.path), repo.second, two),
    )
    # Everything a cell or its agent may change is its own; objects are linked, like
    # `clone --local` links the source's.
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
    three = await templates.materialize(str(repo.path), repo.second, tmp_path / "3" / "ws")
    assert three.clean and git(Path(three.workspace), "rev-parse", "HEAD") == repo.second
    objects = [p for p in (two / ".git" / "objects").rglob("*") if p.is_file()]
    assert objects and all(os.stat(p).st_nlink > 1 for p in objects)


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
