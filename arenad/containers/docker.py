"""The docker CLI, as the judge, the image materializer and submit use it.

Over the CLI rather than the SDK: the same binary a user runs, the same one the image
materializer drives, and a child process that :mod:`arenad.runs.commands` times out and
kills as a group like any other. ``ARENAD_DOCKER`` names another client (a test's
stand-in); the engine is whatever that client reaches (``DOCKER_HOST`` as usual).

A container arenad starts is named by the caller and always removed by name afterwards
(``docker rm -f``): killing the client of ``docker run`` does not stop its container.
"""

from __future__ import annotations

import shutil
import subprocess

import msgspec

from arenad.runs.commands import CommandError, run_ok
from arenad.sandbox.container import docker_bin

__all__ = [
    "ContainerLimits",
    "docker_bin",
    "engine_problem",
    "image_exists",
    "missing_images",
    "remove_container",
    "run_argv",
]

RM_TIMEOUT_S = 120.0
INSPECT_TIMEOUT_S = 60.0


class ContainerLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Docker's own limits for one container. ``memory_mb`` is also the swap limit (no
    swap: an allocation beyond it is OOM-killed, not slowed); ``cpus`` None is no limit;
    ``network`` "none" leaves the container no interface but loopback."""

    memory_mb: int
    pids: int
    cpus: float | None = None
    network: str = "none"


def engine_problem(docker: str | None = None) -> str | None:
    """Why no engine can be used (no client, or no engine answers), or None."""
    docker = docker or docker_bin()
    if shutil.which(docker) is None:
        return f"no docker client ({docker!r} is not on PATH): install docker.io"
    try:
        done = subprocess.run(
            [docker, "info", "--format", "{{.ServerVersion}}"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=INSPECT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker info failed: {exc}"
    if done.returncode != 0 or not done.stdout.strip():
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        return f"no docker engine answers ({tail[0]}); start dockerd (scripts/setup does, as root)"
    return None


def image_exists(image: str, docker: str | None = None) -> bool:
    """Whether the engine holds ``image`` (``docker image inspect``; nothing is pulled)."""
    done = subprocess.run(
        [docker or docker_bin(), "image", "inspect", "--format", "{{.Id}}", image],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=INSPECT_TIMEOUT_S,
        check=False,
    )
    return done.returncode == 0


def missing_images(images: dict[str, str], docker: str | None = None) -> list[str]:
    """One line per image the engine lacks, naming the (first) instance that needs it
    (``images`` maps each image to it); or the one reason no engine can be asked.

    arenad does not pull: a pull may take minutes per image and need a registry's
    credentials, which submit should not wait on or hold; ``docker pull`` them first."""
    problem = engine_problem(docker)
    if problem is not None:
        return [problem]
    return [
        f"instance {instance_id}: image {image} is not in the docker engine"
        " (build, load or pull it first)"
        for image, instance_id in images.items()
        if not image_exists(image, docker)
    ]


def run_argv(
    image: str,
    name: str,
    limits: ContainerLimits,
    *,
    command: list[str],
    stdin: bool = False,
    workdir: str | None = None,
    labels: dict[str, str] | None = None,
    docker: str | None = None,
) -> list[str]:
    """``docker run --rm`` of ``command`` in a new container of ``image`` named ``name``,
    under ``limits``; ``stdin``: keep standard input open (-i), e.g. to feed a script."""
    argv = [docker or docker_bin(), "run", "--rm", "--name", name]
    if stdin:
        argv.append("-i")
    argv += [
        f"--network={limits.network}",
        f"--memory={limits.memory_mb}m",
        f"--memory-swap={limits.memory_mb}m",
        f"--pids-limit={limits.pids}",
    ]
    if limits.cpus is not None:
        argv.append(f"--cpus={limits.cpus:g}")
    if workdir is not None:
        argv.append(f"--workdir={workdir}")
    for key, value in (labels or {}).items():
        argv += ["--label", f"{key}={value}"]
    # The image's own entrypoint is not ours to run: the command is the whole program.
    argv += ["--entrypoint", command[0], image, *command[1:]]
    return argv


async def remove_container(name: str, docker: str | None = None) -> str | None:
    """``docker rm -f name``; None when done or already gone, else what went wrong."""
    try:
        await run_ok([docker or docker_bin(), "rm", "-f", name], RM_TIMEOUT_S, stage="rm")
    except CommandError as exc:
        if "No such container" in exc.stderr_tail:
            return None
        return str(exc)
    return None
