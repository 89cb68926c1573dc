"""The image materializer through the daemon, against the stand-in docker (tests/fakes/docker)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from events import cell as ev
from events.base import Event
from tests.conftest import make_repo
from tests.daemon.support import read_all, start_daemon, submitted

FAKES = Path(__file__).resolve().parents[1] / "fakes"
IMAGE = "arenad-test/testbed:latest"
CELL = "img:i1:CMD:0"


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run(tmp_path: Path, fail: str | None, *daemon_args: str) -> list[Event]:
    home = tmp_path / "home"
    src = tmp_path / "testbed"
    base = make_repo(src, {"a.txt": "a\n"})
    root = tmp_path / "docker-state"
    enc = IMAGE.replace("%", "%25").replace("/", "%2F").replace(":", "%3A")
    shutil.copytree(src, root / "images" / enc / "testbed", symlinks=True)
    camp = tmp_path / "img.toml"
    camp.write_text(
        "\n".join(
            [
                'name = "img"',
                'split = "dev"',
                "[materializer]",
                'kind = "image"',
                "[[instances]]",
                'instance_id = "i1"',
                f'base_commit = "{base}"',
                'problem_statement = "append a line"',
                f'image = "{IMAGE}"',
                'verify_cmd = "grep -q b a.txt"',
                "[[arms]]",
                'name = "CMD"',
                'kind = "command"',
                f"argv = {json.dumps(['bash', '-c', 'echo b >> a.txt'])}",
                "uses_model = false",
                "timeout_s = 30",
            ]
        )
        + "\n"
    )
    env = {
        **os.environ,
        "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}",
        "FAKE_DOCKER_ROOT": str(root),
    }
    # Submit checks the image is in the engine: the stand-in's.
    with _environ({"PATH": env["PATH"], "FAKE_DOCKER_ROOT": str(root)}):
        submitted(home, camp)
    env.pop("FAKE_DOCKER_FAIL", None)
    if fail is not None:
        env["FAKE_DOCKER_FAIL"] = fail
    daemon = start_daemon(
        home, "--until-idle", *daemon_args, env=env, stderr=tmp_path / "daemon.err"
    )
    assert daemon.wait(timeout=60) == 0, (tmp_path / "daemon.err").read_text()[-2000:]
    return [r.event for r in read_all(home) if r.stream == f"cell/{CELL}"]


def test_image_cell_runs_to_recovered(tmp_path: Path) -> None:
    events = _run(tmp_path, None)
    materialized = next(e for e in events if isinstance(e, ev.CellMaterialized))
    assert materialized.materializer == "image" and materialized.clean
    verified = next(e for e in events if isinstance(e, ev.CellVerified))
    assert verified.scored and verified.verify_pass
    assert isinstance(events[-1], ev.CellRecovered)


@pytest.mark.parametrize(
    ("fail", "stage"), [("create", "create-fail"), ("cp", "cp-fail"), ("reset", "reset-fail")]
)
def test_docker_failure_stage_fails_the_cell(tmp_path: Path, fail: str, stage: str) -> None:
    # An infrastructure failure before the run is retried once (the policy's bound here),
    # then stays failed; no agent ever starts.
    events = _run(tmp_path, fail, "--infra-retries", "1", "--retry-backoff", "0")
    failed = [e for e in events if isinstance(e, ev.CellFailed)]
    assert [(f.attempt, f.stage, f.classification) for f in failed] == [
        (1, stage, "infrastructure"),
        (2, stage, "infrastructure"),
    ]
    assert all(f.retryable for f in failed)
    retried = [e for e in events if isinstance(e, ev.CellRetried)]
    assert [(r.attempt, r.requested_by) for r in retried] == [(2, "policy")]
    assert isinstance(events[-1], ev.CellFailed)
    assert not any(isinstance(e, ev.RunStarted) for e in events)
