"""Workspace materializers: the instance image (default) or a plain git clone (opt-in)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import msgspec

from arenad.materialize.git import materialize_git
from arenad.materialize.image import container_name, default_image_name, materialize_image
from arenad.materialize.seal import Seal, seal_workspace
from arenad.materialize.templates import WorkspaceTemplates
from arenad.materialize.workspace import (
    GIT_TIMEOUT_S,
    WORK_BRANCH,
    MaterializeError,
    MaterializeResult,
    base_tree_of,
)
from events.specs import CellSpec

__all__ = [
    "GIT_TIMEOUT_S",
    "WORK_BRANCH",
    "MaterializeError",
    "MaterializeResult",
    "Seal",
    "WorkspaceTemplates",
    "container_name",
    "default_image_name",
    "materialize",
    "materialize_git",
    "materialize_image",
    "seal_copy",
]


async def materialize(
    spec: CellSpec,
    dest: str | os.PathLike[str],
    *,
    git_root: str | os.PathLike[str] | None = None,
    docker: str = "docker",
    templates: WorkspaceTemplates | None = None,
) -> MaterializeResult:
    """Materialize the cell's workspace at ``dest`` per ``spec.materializer``, sealed at
    ``git_root`` when given (a dir outside the run dir; see :mod:`arenad.materialize.seal`).

    image: ``spec.instance.image`` or the SWE-bench default name for the instance.
    git: ``spec.materializer.source`` (a local path or URL) is required; with
    ``templates``, the workspace is a copy of that (source, base)'s prepared checkout.
    """
    instance = spec.instance
    base = instance.base_commit
    target = Path(dest)
    root = None if git_root is None else Path(git_root)
    if spec.materializer.kind == "image":
        image = instance.image or default_image_name(instance.instance_id)
        result = await materialize_image(
            image, base, target, instance_id=instance.instance_id, docker=docker
        )
    else:
        source = spec.materializer.source
        if not source:
            raise MaterializeError("config", "the git materializer needs materializer.source")
        if templates is not None:
            return await templates.materialize(source, base, target, git_root=root)
        result = await materialize_git(source, base, target)
    if root is None:
        return result
    return msgspec.structs.replace(result, seal=await seal_copy(target, root, base))


async def seal_copy(ws: Path, root: Path, base: str) -> Seal:
    """Seal a workspace that owns its objects (a clone, a testbed): the root's repo gets a
    copy of them, taken now, before any agent has the workspace."""
    tree = await base_tree_of(ws, base)
    try:
        return await asyncio.to_thread(
            seal_workspace,
            ws,
            root,
            base,
            tree,
            objects=ws / ".git" / "objects",
            link_objects=False,
        )
    except OSError as exc:
        raise MaterializeError("seal-fail", f"{type(exc).__name__}: {exc}") from exc
