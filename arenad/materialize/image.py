"""The image materializer (reference: materialize.ts): copy /testbed out of the instance image.

``docker create --name <n> <image>`` → ``docker cp <n>:/testbed <dest>`` → ``docker rm -f <n>``
(always, once a container may exist) → require ``<dest>/.git`` → reset / clean / branch /
checkout → HEAD and cleanliness. Errors carry the reference's stage labels: create-fail, cp-fail,
no-git, reset-fail (and branch-fail / checkout-fail / status-fail after it).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from arenad.materialize.workspace import (
    GIT_TIMEOUT_S,
    MaterializeError,
    MaterializeResult,
    checkout_work_branch,
    command_step,
    prepare_dest,
)
from arenad.runs.commands import CommandError, run_ok

# docker create may pull a multi-GB image; cp copies a whole repo with its environment.
CREATE_TIMEOUT_S = 1800.0
CP_TIMEOUT_S = 600.0
RM_TIMEOUT_S = 120.0


def default_image_name(instance_id: str) -> str:
    """SWE-bench's instance image: ``swebench/sweb.eval.x86_64.<iid, __ → _1776_>:latest``."""
    return f"swebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest"


def container_name(instance_id: str, *, pid: int | None = None, suffix: str | None = None) -> str:
    """``ext-<iid with _ and / → ->-<pid>-<random>``: unique per daemon and call."""
    safe = instance_id.replace("_", "-").replace("/", "-")
    return f"ext-{safe}-{os.getpid() if pid is None else pid}-{suffix or secrets.token_hex(4)}"


async def materialize_image(
    image: str,
    base: str,
    dest: Path,
    *,
    instance_id: str,
    docker: str = "docker",
    create_timeout_s: float = CREATE_TIMEOUT_S,
    cp_timeout_s: float = CP_TIMEOUT_S,
    rm_timeout_s: float = RM_TIMEOUT_S,
    git_timeout_s: float = GIT_TIMEOUT_S,
    name: str | None = None,
) -> MaterializeResult:
    """Copy ``/testbed`` out of ``image`` into ``dest`` (replacing it) at ``base``."""
    name = name or container_name(instance_id)
    prepare_dest(dest)
    created = False
    rm_note = ""
    try:
        try:
            await run_ok(
                [docker, "create", "--name", name, image], create_timeout_s, stage="create-fail"
            )
            created = True
        except CommandError as exc:
            # A create that timed out may still have made the container: remove it too.
            created = exc.timed_out
            raise MaterializeError("create-fail", str(exc)) from exc
        await command_step(
            "cp-fail", [docker, "cp", f"{name}:/testbed", os.fspath(dest)], timeout_s=cp_timeout_s
        )
    finally:
        if created:
            try:
                await run_ok([docker, "rm", "-f", name], rm_timeout_s, stage="rm")
            except CommandError as exc:
                # Not fatal to the workspace; the leftover is named ext-… for cleanup.
                rm_note = f"; rm failed: {exc}"
    dotgit = dest / ".git"
    if dotgit.is_symlink() or not dotgit.is_dir():
        # A .git file or link would name another git dir: only a real one is this checkout's.
        raise MaterializeError("no-git", f"{image}:/testbed copied to {dest} has no .git dir")
    head, clean = await checkout_work_branch(dest, base, timeout_s=git_timeout_s)
    return MaterializeResult(
        workspace=os.fspath(dest),
        head=head,
        clean=clean,
        materializer="image",
        detail=f"{image} (container {name}{rm_note})",
    )
