"""arenad.containers.docker: the argv it builds, and its limits holding in a real engine."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from arenad.containers.docker import (
    ContainerLimits,
    engine_problem,
    missing_images,
    remove_container,
    run_argv,
)
from tests.swebench_support import engine_or_skip

BASE = "local/deb-py:bookworm"


def test_run_argv_carries_every_limit() -> None:
    limits = ContainerLimits(memory_mb=256, pids=64, cpus=1.5)
    argv = run_argv("img:1", "n1", limits, command=["/bin/bash", "-c", "x"], stdin=True, docker="d")
    assert argv[:5] == ["d", "run", "--rm", "--name", "n1"]
    for flag in (
        "-i",
        "--network=none",
        "--memory=256m",
        "--memory-swap=256m",
        "--pids-limit=64",
        "--cpus=1.5",
    ):
        assert flag in argv
    # The image's entrypoint is replaced: the command is the whole program.
    assert argv[-5:] == ["--entrypoint", "/bin/bash", "img:1", "-c", "x"]


def test_no_client_is_a_clear_problem(tmp_path: Path) -> None:
    problem = engine_problem(str(tmp_path / "no-docker"))
    assert problem is not None and "no docker client" in problem
    (missing,) = missing_images({"a:1": "x__y-1"}, str(tmp_path / "no-docker"))
    assert "no docker client" in missing


def _base_or_skip() -> None:
    engine_or_skip()
    subprocess.run([str(Path(__file__).parents[2] / "scripts/build-base-image")], check=True)


def test_missing_images_names_the_instance() -> None:
    _base_or_skip()
    assert missing_images({BASE: "a__b-1"}) == []
    images = {BASE: "a__b-1", "arenad-test/none:never": "c__d-2", "arenad-test/no:2": "e__f-3"}
    first, second = missing_images(images)
    assert "c__d-2" in first and "arenad-test/none:never" in first
    assert "e__f-3" in second and "arenad-test/no:2" in second


async def test_remove_container_of_nothing_is_done() -> None:
    _base_or_skip()
    assert await remove_container("arenad-test-no-such-container") is None


def _run(name: str, limits: ContainerLimits, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        run_argv(BASE, name, limits, command=["bash", "-c", script]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_limits_hold_in_the_engine() -> None:
    _base_or_skip()
    limits = ContainerLimits(memory_mb=64, pids=32)
    # Memory: an allocation beyond the limit (no swap) is OOM-killed.
    done = _run("arenad-test-oom", limits, "python3 -c 'x = bytearray(256 << 20); print(1)'")
    assert done.returncode == 137, (done.returncode, done.stderr)
    # Network: none, so a listener on the host's loopback is unreachable.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 3)'"
        done = _run("arenad-test-net", limits, probe)
    assert done.returncode != 0 and "Connection refused" in done.stderr, done.stderr
    # Processes: the pids limit stops forks past it.
    done = _run("arenad-test-pids", limits, "for i in $(seq 1 64); do sleep 5 & done; wait")
    assert "fork" in done.stderr or "unavailable" in done.stderr, done.stderr
