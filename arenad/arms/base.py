"""The arm interface and the pieces arms share."""

from __future__ import annotations

import abc
import shlex
from pathlib import Path

import msgspec

from arenad.ingest import WatchSource, file_source
from arenad.sandbox.secrets import wrap_bash
from events.specs import ArmSpec, CellSpec, CommandArm, SoloArm, SupervisorArm


class ArmContext(msgspec.Struct, frozen=True, kw_only=True):
    spec: CellSpec
    cell_id: str
    attempt: int
    run_dir: Path
    workspace: Path
    # The cell's isolated environment (private HOME, XDG dirs, opencode store).
    env: dict[str, str]

    @property
    def prompt_file(self) -> Path:
        return self.run_dir / "prompt.txt"


class Launch(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the run wrapper needs; the agent's stdin is /dev/null unless the script
    redirects it, and its stdout / stderr go to the arm's files in the run dir."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    timeout_s: float
    kill_grace_s: float


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    scored: bool
    not_scored_reason: str | None = None


class Arm(abc.ABC):
    # The agent's stdout and stderr files in the run dir (the seed's names).
    stdout_name: str
    stderr_name: str

    @abc.abstractmethod
    def prepare(self, ctx: ArmContext) -> Launch:
        """Write the arm's inputs into the run dir and say how to start it."""

    def watch_sources(self, ctx: ArmContext) -> list[WatchSource]:
        """What is ingested live while the agent runs: by default its stdout stream,
        a JSON-lines file the agent writes (source ``stdout``)."""
        return [file_source("stdout", ctx.run_dir / self.stdout_name)]

    def outcome(self, ended: str, rc: int | None, ctx: ArmContext) -> Outcome:
        """Whether the run counts. The seed's rule for solo-like arms: exit 0, in time."""
        if ended == "timedOut":
            return Outcome(scored=False, not_scored_reason=f"timed out (exit {rc})")
        if ended == "aborted":
            return Outcome(scored=False, not_scored_reason=f"aborted (exit {rc})")
        if rc != 0:
            return Outcome(scored=False, not_scored_reason=f"agent exited {rc}")
        return Outcome(scored=True)


def write_prompt(ctx: ArmContext, suffix: str) -> Path:
    ctx.prompt_file.write_text(ctx.spec.instance.problem_statement + suffix)
    return ctx.prompt_file


def under_secrets(ctx: ArmContext, script: str) -> tuple[list[str], str]:
    """argv and cwd for a model-touching script (dotenvx when secrets are configured)."""
    wrapped = wrap_bash(ctx.spec.secrets, script)
    return wrapped.argv, wrapped.cwd if wrapped.cwd is not None else str(ctx.workspace)


def q(value: str | Path) -> str:
    return shlex.quote(str(value))


def arm_for(spec: ArmSpec) -> Arm:
    # Imported here so each arm module stays independent of the others.
    if isinstance(spec, SoloArm):
        from arenad.arms.solo import SoloArmRunner

        return SoloArmRunner(spec)
    if isinstance(spec, CommandArm):
        from arenad.arms.command import CommandArmRunner

        return CommandArmRunner(spec)
    if isinstance(spec, SupervisorArm):
        from arenad.arms.supervisor import SupervisorArmRunner

        return SupervisorArmRunner(spec)
    raise TypeError(f"unknown arm spec {type(spec).__name__}")
