"""Workspace materializers: the instance image (default) or a plain git clone (opt-in)."""

from __future__ import annotations

import os
from pathlib import Path

from arenad.materialize.git import materialize_git
from arenad.materialize.image import container_name, default_image_name, materialize_image
from arenad.materialize.templates import WorkspaceTemplates
from arenad.materialize.workspace import (
    GIT_TIMEOUT_S,
    WORK_BRANCH,
    MaterializeError,
    MaterializeResult,
)
from events.specs import CellSpec

__all__ = [
    "GIT_TIMEOUT_S",
    "WORK_BRANCH",
    "MaterializeError",
    "MaterializeResult",
    "WorkspaceTemplates",
    "container_name",
    "default_image_name",
    "materialize",
    "materialize_git",
    "materialize_image",
]


async def materialize(
    spec: CellSpec,
    dest: str | os.PathLike[str],
    *,
    docker: str = "docker",
    git: str = "git",
    templates: WorkspaceTemplates | None = None,
) -> MaterializeResult:
    """Materialize the cell's workspace at ``dest`` per ``spec.materializer``.

    image: ``spec.instance.image`` or the SWE-bench default name for the instance.
    git: ``spec.materializer.source`` (a local path or URL) is required; with
    ``templates``, the workspace is a copy of that (source, base)'s prepared checkout.
    """
    instance = spec.instance
    target = Path(dest)
    if spec.materializer.kind == "image":
        image = instance.image or default_image_name(instance.instance_id)
        return await materialize_image(
            image,
            instance.base_commit,
            target,
            instance_id=instance.instance_id,
            docker=docker,
            git=git,
        )
    source = spec.materializer.source
    if not source:
        raise MaterializeError("config", "the git materializer needs materializer.source")
    if templates is not None:
        return await templates.materialize(source, instance.base_commit, target, git=git)
    return await materialize_git(source, instance.base_commit, target, git=git)
