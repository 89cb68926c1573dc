"""The image materializer against a real docker engine and the local SWE-bench's real
images (skipped, saying why, without an engine), with the reference's stage labels."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from arenad.materialize import WORK_BRANCH, MaterializeError, materialize_image
from tests.materialize.gitrepo import git
from tests.swebench_support import LocalSwebench, local_swebench  # noqa: F401

IID = "arenad__textkit-1"


def _containers(prefix: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-a", "--format", "{{.Names}}", "--filter", f"name={prefix}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


async def test_testbed_comes_out_of_the_image_at_base(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    instance = local_swebench.instance(IID)
    image = f"swebench/sweb.eval.x86_64.{IID.replace('__', '_1776_')}:latest"
    name = "ext-arenad-test-materialize-1"
    result = await materialize_image(
        image, instance.base_commit, tmp_path / "ws", instance_id=IID, name=name
    )
    ws = Path(result.workspace)
    assert result.head == instance.base_commit and result.clean
    assert git(ws, "rev-parse", "--abbrev-ref", "HEAD") == WORK_BRANCH
    assert (ws / "textkit" / "roman.py").is_file()
    # The container it copied from is gone.
    assert _containers(name) == []


async def test_stage_labels_against_real_images(
    local_swebench: LocalSwebench,  # noqa: F811
    tmp_path: Path,
) -> None:
    base = local_swebench.instance(IID).base_commit
    with pytest.raises(MaterializeError) as err:
        await materialize_image(
            "arenad-test/no-such-image:never", base, tmp_path / "a", instance_id=IID
        )
    assert err.value.stage == "create-fail"
    # The base image has no /testbed.
    with pytest.raises(MaterializeError) as err:
        await materialize_image("local/deb-py:bookworm", base, tmp_path / "b", instance_id=IID)
    assert err.value.stage == "cp-fail"
    # An image whose /testbed is no git checkout.
    ctx = tmp_path / "ctx"
    (ctx / "testbed").mkdir(parents=True)
    (ctx / "testbed" / "file.txt").write_text("x\n")
    (ctx / "Dockerfile").write_text("FROM local/deb-py:bookworm\nCOPY testbed /testbed\n")
    subprocess.run(
        ["docker", "build", "-q", "-t", "arenad-test/no-git:latest", str(ctx)],
        check=True,
        capture_output=True,
    )
    with pytest.raises(MaterializeError) as err:
        await materialize_image("arenad-test/no-git:latest", base, tmp_path / "c", instance_id=IID)
    assert err.value.stage == "no-git"
    # A base the image's repository does not hold.
    image = f"swebench/sweb.eval.x86_64.{IID.replace('__', '_1776_')}:latest"
    with pytest.raises(MaterializeError) as err:
        await materialize_image(image, "f" * 40, tmp_path / "d", instance_id=IID)
    assert err.value.stage == "reset-fail"
    # None left behind by this process (names carry the pid; the engine is shared).
    assert _containers(f"ext-arenad--textkit-1-{os.getpid()}-") == []
