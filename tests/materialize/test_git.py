"""The git materializer against real repositories."""

from __future__ import annotations

from pathlib import Path

import pytest

from arenad.materialize import WORK_BRANCH, MaterializeError, materialize, materialize_git
from events.specs import CellSpec, InstanceSpec, MaterializerSpec, SoloArm
from tests.materialize.gitrepo import git, make_repo


async def test_clone_checks_out_work_branch_at_base(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    dest = tmp_path / "run" / "ws"
    result = await materialize_git(str(repo.path), repo.first, dest)
    assert result.head == repo.first
    assert result.clean is True
    assert result.materializer == "git" and result.workspace == str(dest)
    assert git(dest, "rev-parse", "--abbrev-ref", "HEAD") == WORK_BRANCH
    assert (dest / "app.py").read_text() == "v1\n"
    assert not (dest / "new.py").exists()


async def test_existing_dest_is_replaced(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    dest = tmp_path / "ws"
    dest.mkdir()
    (dest / "stale.txt").write_text("from a previous try")
    result = await materialize_git(str(repo.path), repo.second, dest)
    assert result.head == repo.second and result.clean
    assert not (dest / "stale.txt").exists()


async def test_unreachable_base_is_fetched(tmp_path: Path) -> None:
    # A commit no branch reaches is not cloned; the materializer asks the remote for it.
    repo = make_repo(tmp_path / "src")
    git(repo.path, "checkout", "-q", "--detach", repo.second)
    (repo.path / "app.py").write_text("v3\n")
    git(repo.path, "commit", "-q", "-am", "dangling")
    dangling = git(repo.path, "rev-parse", "HEAD")
    git(repo.path, "checkout", "-q", "main")
    git(repo.path, "config", "uploadpack.allowAnySHA1InWant", "true")
    # file:// forces the pack transport (a plain local path would copy every object).
    result = await materialize_git(f"file://{repo.path}", dangling, tmp_path / "ws")
    assert result.head == dangling and (tmp_path / "ws" / "app.py").read_text() == "v3\n"


async def test_bad_base_is_reset_fail(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    with pytest.raises(MaterializeError) as info:
        await materialize_git(str(repo.path), "0" * 40, tmp_path / "ws")
    assert info.value.stage == "reset-fail"
    assert str(info.value).startswith("reset-fail: ")


async def test_missing_source_is_clone_fail(tmp_path: Path) -> None:
    with pytest.raises(MaterializeError) as info:
        await materialize_git(str(tmp_path / "nowhere"), "HEAD", tmp_path / "ws")
    assert info.value.stage == "clone-fail"


def _spec(source: str | None, base: str) -> CellSpec:
    return CellSpec(
        campaign="c",
        instance=InstanceSpec(
            instance_id="o__r-1", base_commit=base, problem_statement="p", verify_cmd="true"
        ),
        arm=SoloArm(name="SOLO", model="m/x"),
        rep=0,
        materializer=MaterializerSpec(kind="git", source=source),
    )


async def test_materialize_entry_picks_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src")
    result = await materialize(_spec(str(repo.path), repo.first), tmp_path / "ws")
    assert result.materializer == "git" and result.head == repo.first
    with pytest.raises(MaterializeError) as info:
        await materialize(_spec(None, repo.first), tmp_path / "ws2")
    assert info.value.stage == "config"
