"""Checks before spending (issue 29, finding 6): what would fail every cell of a campaign at
its first step is found at submit, before anything is written.

- **Sources**: every git materializer source that is a local path exists and holds each
  instance's base commit (one ``git cat-file --batch-check`` per source). A URL is not
  checked here (that would be a network call at submit); its clone fails at run time.
- **Arms**: each arm's launch is built as a cell's would be (the arm's own ``prepare``,
  in a scratch run dir outside every home) and confined exactly as at launch
  (:func:`arenad.sandbox.confine.confine`): its executable and a script's interpreter
  (a virtualenv's ``bin`` and its base interpreter too) must be visible inside the
  sandbox, and its shares must exist and not be or hold the arenad home or the user's
  home. An executable given by path must exist (with ``kind = "none"`` too); one given
  by a bare name that this ``PATH`` does not find is left to the launch, which looks it
  up on the daemon's.

The checks use this process's environment (its ``PATH``): submit where the daemon runs.
Images are checked by :func:`arenad.containers.docker.missing_images` (not here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from arenad.arms import ArmContext, arm_for
from arenad.errors import UserError
from arenad.sandbox.cellenv import prepare_cell_env
from arenad.sandbox.confine import SandboxError, confine
from events.specs import CellSpec

GIT_TIMEOUT_S = 60.0


def preflight_problems(cells: Iterable[CellSpec], home_root: str) -> list[str]:
    """Every problem found, sources first (one pass over the cells)."""
    per_instance: dict[str, CellSpec] = {}
    per_arm: dict[str, CellSpec] = {}
    for spec in cells:
        per_instance.setdefault(spec.instance.instance_id, spec)
        per_arm.setdefault(spec.arm.name, spec)
    return [
        *source_problems(per_instance.values()),
        *arm_problems(per_arm.values(), home_root),
    ]


def source_problems(cells: Iterable[CellSpec]) -> list[str]:
    """One line per missing source or base commit (naming the instance), in cell order."""
    wanted: dict[str, dict[str, str]] = {}
    for spec in cells:
        m = spec.materializer
        if m.kind != "git" or m.source is None or not os.path.isabs(m.source):
            continue
        wanted.setdefault(m.source, {}).setdefault(
            spec.instance.base_commit, spec.instance.instance_id
        )
    return commit_problems(wanted)


def commit_problems(wanted: dict[str, dict[str, str]]) -> list[str]:
    """:func:`source_problems` of what the cells want: each local source -> each base commit
    -> the first instance wanting it (the campaign's validating pass collects it)."""
    problems: list[str] = []
    for source, commits in wanted.items():
        first = next(iter(commits.values()))
        if not os.path.exists(source):
            problems.append(f"[materializer] source: {source} does not exist (instance {first})")
            continue
        missing = _missing_commits(source, list(commits))
        if missing is None:
            problems.append(
                f"[materializer] source: {source} is not a git repository (instance {first})"
            )
            continue
        for commit in missing:
            problems.append(f"instance {commits[commit]}: base_commit {commit} is not in {source}")
    return problems


def _missing_commits(source: str, commits: Sequence[str]) -> list[str] | None:
    """The commits ``source`` does not hold (None: it is not a git repository)."""
    git = shutil.which("git")
    if git is None:
        # Not checkable here (the daemon may have its own PATH): its materializer says.
        return []
    query = "".join(f"{c}^{{commit}}\n" for c in commits)
    try:
        out = subprocess.run(
            [git, "-C", source, "cat-file", "--batch-check"],
            input=query.encode(),
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    lines = out.stdout.decode("utf-8", "replace").splitlines()
    return [c for c, line in zip(commits, lines, strict=False) if line.endswith(" missing")]


def arm_problems(cells: Iterable[CellSpec], home_root: str) -> list[str]:
    """One line per arm whose launch would be refused (its first cell's, as at launch)."""
    seen: set[str] = set()
    problems: list[str] = []
    for spec in cells:
        if spec.arm.name in seen:
            continue
        seen.add(spec.arm.name)
        problem = _arm_problem(spec, home_root)
        if problem is not None:
            problems.append(f"[[arms]] {spec.arm.name}: {problem}")
    return problems


def _arm_problem(spec: CellSpec, home_root: str) -> str | None:
    with tempfile.TemporaryDirectory(prefix="arenad-preflight-") as scratch:
        run_dir = os.path.join(scratch, "run")
        workspace = os.path.join(run_dir, "ws")
        os.makedirs(workspace)
        try:
            env = prepare_cell_env(run_dir, os.environ)
        except Exception:
            return None  # the cell's own environment is the run's to record
        ctx = ArmContext(
            spec=spec,
            cell_id=spec.cell_id,
            attempt=1,
            run_dir=Path(run_dir),
            workspace=Path(workspace),
            env=dict(env.env),
            home_root=home_root,
            dry_run=True,
        )
        try:
            command = arm_for(spec.arm).prepare(ctx)
            for exe in command.executables:
                if _which(exe, command.env, command.cwd) is not None:
                    continue
                if "/" in exe:
                    return f"the agent's executable {exe!r} was not found"
                # A bare name this PATH does not find may be on the daemon's: not refused
                # here (the launch checks it with the daemon's PATH).
                return None
            if spec.sandbox.kind == "none":
                return None
            confine(
                ctx.sandbox,
                command.argv,
                env=command.env,
                chdir=command.cwd,
                read_only=command.read_only,
                read_write=command.read_write,
                executables=command.executables,
            )
        except (SandboxError, UserError) as exc:
            return str(exc)
        except Exception:
            # What else fails is the run's to record (with its stage), not submit's.
            return None
    return None


def _which(exe: str, env: dict[str, str], cwd: str) -> str | None:
    if "/" in exe:
        path = os.path.normpath(os.path.join(cwd, exe))
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(exe, path=env.get("PATH", os.defpath))
