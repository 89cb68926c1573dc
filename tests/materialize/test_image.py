"""The image materializer against tests/fakes/docker (no docker engine runs here)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from arenad.materialize import (
    WORK_BRANCH,
    MaterializeError,
    container_name,
    default_image_name,
    materialize,
    materialize_image,
)
from events.specs import CellSpec, InstanceSpec, MaterializerSpec, SoloArm
from tests.materialize.gitrepo import Repo, git, make_repo

FAKE_DOCKER = Path(__file__).resolve().parent.parent / "fakes" / "docker"
IID = "astropy__astropy-12907"
IMAGE = default_image_name(IID)


class FakeDocker:
    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.monkeypatch = monkeypatch
        (root / "images").mkdir(parents=True)
        monkeypatch.setenv("FAKE_DOCKER_ROOT", str(root))
        monkeypatch.delenv("FAKE_DOCKER_FAIL", raising=False)

    def add_image(self, image: str, testbed: Path) -> None:
        enc = image.replace("%", "%25").replace("/", "%2F").replace(":", "%3A")
        shutil.copytree(testbed, self.root / "images" / enc / "testbed", symlinks=True)

    def fail(self, stage: str) -> None:
        self.monkeypatch.setenv("FAKE_DOCKER_FAIL", stage)

    def calls(self) -> list[list[str]]:
        log = self.root / "calls.log"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    def containers(self) -> list[str]:
        cdir = self.root / "containers"
        return sorted(p.name for p in cdir.iterdir()) if cdir.exists() else []


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDocker:
    return FakeDocker(tmp_path / "docker-state", monkeypatch)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path / "testbed-src")


def test_default_image_name() -> None:
    assert (
        default_image_name("django__django-11099")
        == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    )


def test_container_name() -> None:
    assert container_name("a_b/c__d-1", pid=42, suffix="ff") == "ext-a-b-c--d-1-42-ff"
    generated = container_name(IID)
    assert generated.startswith(f"ext-astropy--astropy-12907-{os.getpid()}-")
    assert generated != container_name(IID)


async def test_happy_path(tmp_path: Path, docker: FakeDocker, repo: Repo) -> None:
    docker.add_image(IMAGE, repo.path)
    dest = tmp_path / "run" / "ws"
    result = await materialize_image(
        IMAGE, repo.first, dest, instance_id=IID, docker=str(FAKE_DOCKER)
    )
    assert result.materializer == "image"
    assert result.head == repo.first and result.clean
    assert git(dest, "rev-parse", "--abbrev-ref", "HEAD") == WORK_BRANCH
    assert (dest / "app.py").read_text() == "v1\n"
    calls = docker.calls()
    assert [c[0] for c in calls] == ["create", "cp", "rm"]
    name = calls[0][calls[0].index("--name") + 1]
    assert name.startswith("ext-astropy--astropy-12907-")
    assert calls[0][-1] == IMAGE
    assert calls[1] == ["cp", f"{name}:/testbed", str(dest)]
    assert calls[2] == ["rm", "-f", name]
    assert docker.containers() == []
    assert name in result.detail and IMAGE in result.detail


async def test_existing_dest_is_replaced_not_nested(
    tmp_path: Path, docker: FakeDocker, repo: Repo
) -> None:
    # docker cp into an existing directory would nest the tree as dest/testbed.
    docker.add_image(IMAGE, repo.path)
    dest = tmp_path / "ws"
    (dest / "junk").mkdir(parents=True)
    result = await materialize_image(
        IMAGE, repo.second, dest, instance_id=IID, docker=str(FAKE_DOCKER)
    )
    assert result.head == repo.second
    assert not (dest / "testbed").exists() and not (dest / "junk").exists()


async def test_docker_found_on_path(
    tmp_path: Path, docker: FakeDocker, repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker.add_image(IMAGE, repo.path)
    monkeypatch.setenv("PATH", f"{FAKE_DOCKER.parent}{os.pathsep}{os.environ['PATH']}")
    result = await materialize_image(IMAGE, repo.first, tmp_path / "ws", instance_id=IID)
    assert result.head == repo.first


async def test_unknown_image_is_create_fail(tmp_path: Path, docker: FakeDocker) -> None:
    with pytest.raises(MaterializeError) as info:
        await materialize_image(
            IMAGE, "HEAD", tmp_path / "ws", instance_id=IID, docker=str(FAKE_DOCKER)
        )
    assert info.value.stage == "create-fail"
    assert "pull access denied" in str(info.value)
    # Nothing was created, so nothing is removed.
    assert [c[0] for c in docker.calls()] == ["create"]


async def test_create_fail(tmp_path: Path, docker: FakeDocker, repo: Repo) -> None:
    docker.add_image(IMAGE, repo.path)
    docker.fail("create")
    with pytest.raises(MaterializeError) as info:
        await materialize_image(
            IMAGE, repo.first, tmp_path / "ws", instance_id=IID, docker=str(FAKE_DOCKER)
        )
    assert info.value.stage == "create-fail"
    assert docker.containers() == []


async def test_cp_fail_still_removes_container(
    tmp_path: Path, docker: FakeDocker, repo: Repo
) -> None:
    docker.add_image(IMAGE, repo.path)
    docker.fail("cp")
    with pytest.raises(MaterializeError) as info:
        await materialize_image(
            IMAGE, repo.first, tmp_path / "ws", instance_id=IID, docker=str(FAKE_DOCKER)
        )
    assert info.value.stage == "cp-fail"
    assert "Could not find the file /testbed" in str(info.value)
    assert [c[0] for c in docker.calls()] == ["create", "cp", "rm"]
    assert docker.containers() == []


async def test_no_git(tmp_path: Path, docker: FakeDocker, repo: Repo) -> None:
    docker.add_image(IMAGE, repo.path)
    docker.fail("no-git")
    with pytest.raises(MaterializeError) as info:
        await materialize_image(
            IMAGE, repo.first, tmp_path / "ws", instance_id=IID, docker=str(FAKE_DOCKER)
        )
    assert info.value.stage == "no-git"
    assert (tmp_path / "ws" / "app.py").exists()
    assert docker.containers() == []


async def test_reset_fail_when_base_absent(tmp_path: Path, docker: FakeDocker, repo: Repo) -> None:
    docker.add_image(IMAGE, repo.path)
    docker.fail("reset")
    with pytest.raises(MaterializeError) as info:
        await materialize_image(
            IMAGE, repo.first, tmp_path / "ws", instance_id=IID, docker=str(FAKE_DOCKER)
        )
    assert info.value.stage == "reset-fail"
    assert docker.containers() == []


async def test_rm_failure_is_tolerated_and_noted(
    tmp_path: Path, docker: FakeDocker, repo: Repo
) -> None:
    docker.add_image(IMAGE, repo.path)
    docker.fail("rm")
    result = await materialize_image(
        IMAGE, repo.first, tmp_path / "ws", instance_id=IID, docker=str(FAKE_DOCKER)
    )
    assert result.head == repo.first
    assert "rm failed" in result.detail


async def test_fake_rejects_unknown_container(tmp_path: Path, docker: FakeDocker) -> None:
    from arenad.runs.commands import run

    result = await run([str(FAKE_DOCKER), "cp", "nope:/testbed", str(tmp_path / "x")])
    assert result.code == 1
    assert result.stderr_text == "Error response from daemon: No such container: nope\n"


async def test_materialize_entry_picks_image(
    tmp_path: Path, docker: FakeDocker, repo: Repo
) -> None:
    docker.add_image(IMAGE, repo.path)
    spec = CellSpec(
        campaign="c",
        instance=InstanceSpec(
            instance_id=IID, base_commit=repo.second, problem_statement="p", verify_cmd="true"
        ),
        arm=SoloArm(name="SOLO", model="m/x"),
        rep=0,
        materializer=MaterializerSpec(kind="image"),
    )
    result = await materialize(spec, tmp_path / "ws", docker=str(FAKE_DOCKER))
    assert result.materializer == "image" and result.head == repo.second
    # An explicit image on the instance wins over the default name.
    other = "registry.example/custom:1"
    docker.add_image(other, repo.path)
    spec2 = CellSpec(
        campaign="c",
        instance=InstanceSpec(
            instance_id=IID,
            base_commit=repo.first,
            problem_statement="p",
            verify_cmd="true",
            image=other,
        ),
        arm=SoloArm(name="SOLO", model="m/x"),
        rep=0,
        materializer=MaterializerSpec(kind="image"),
    )
    result = await materialize(spec2, tmp_path / "ws2", docker=str(FAKE_DOCKER))
    assert other in result.detail and result.head == repo.first
