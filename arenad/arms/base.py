"""The arm interface: everything that differs between kinds of agent, in one place.

The cell runner treats every arm alike; an arm says

- how its agent is launched (:meth:`Arm.prepare`, a step that writes the arm's inputs into
  the run dir where the cell lives) and what facts come before the start
  (:meth:`Arm.before_start`, e.g. the supervisor's provenance);
- what is ingested live while it runs (:meth:`Arm.watch_sources`);
- what it records when the run ends (:meth:`Arm.end_events`) and whether the run counts
  (:meth:`Arm.outcome`, a pure rule over the cell's state);
- how its spend is recovered (:meth:`Arm.recover`), whether that joins the verdict's
  transaction (:attr:`Arm.recovery_joins_verify`), and what it leaves beside the run once
  recovered (:meth:`Arm.after_recovered`).

Arms know nothing of the store or the ledger: they return events and append requests,
and read the attempt's ingested lines only through the reader they are handed. Steps that
touch the cell's files run at its site (:class:`arenad.runs.executor.Site`).
"""

from __future__ import annotations

import abc
import shlex
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import ClassVar, Literal

import msgspec

from arenad.arms.evidence import InfraCause, infra_cause
from arenad.cell.attempts import Attempt
from arenad.cell.machine import CellState, CellStatus
from arenad.errors import ArenadError
from arenad.ingest import WatchSource, file_source
from arenad.js import js_parse
from arenad.materialize.image import default_image_name
from arenad.recovery.capture import recover_tree
from arenad.recovery.usage import checked_usage
from arenad.runs import netns
from arenad.runs.executor import Site
from arenad.sandbox import container
from arenad.sandbox.cellenv import cell_paths
from arenad.sandbox.confine import CellSandbox, SandboxError, confine
from arenad.sandbox.network import network_plan
from arenad.sandbox.secrets import wrap_bash
from arenad.store.base import AppendRequest
from events import cell as ev
from events.base import Event, Recorded
from events.ingest import LineIngested, LineMalformed
from events.specs import CellSpec


class ProvenanceError(ArenadError):
    """What sits in the arm's seat cannot be established (the reference's armProvenance throws):
    the cell fails before anything runs, as no paid run starts without knowing it."""


IngestReader = Callable[[], Awaitable[Sequence[Recorded | Event]]]
"""Reads the attempt's ingest stream (only arms whose rules need it call it)."""

AttemptReader = Callable[[], Awaitable[Attempt]]
"""Reads the attempt as the attempts fold records it, from the committed log (only arms
that leave a document beside the run call it: :mod:`arenad.arms.documents`)."""


class ArmContext(msgspec.Struct, frozen=True, kw_only=True):
    spec: CellSpec
    cell_id: str
    attempt: int
    run_dir: Path
    workspace: Path
    # The cell's isolated environment (private HOME, XDG dirs, opencode store).
    env: dict[str, str]
    # The arenad home the run dir lives in: hidden from the cell, with its other cells.
    home_root: str = ""
    # The campaign's cap in force and its spend of record when the attempt starts: the
    # model gateway refuses the calls past the cap, at the wire (None: no cap).
    campaign_cap_usd: float | None = None
    campaign_spent_usd: float = 0.0
    # Prepared only to check that it would launch (submit's preflight): no side effect
    # outside the run dir, so no model gateway started (it would keep the submitter's env)
    # and no grant issued.
    dry_run: bool = False

    @property
    def prompt_file(self) -> Path:
        return self.run_dir / "prompt.txt"

    @property
    def sandbox(self) -> CellSandbox:
        """What the cell's children may see (the spec's [sandbox], around this run dir)."""
        secrets = self.spec.secrets
        box = self.spec.sandbox
        docker = box.kind == "docker"
        instance = self.spec.instance
        image = box.image or instance.image or default_image_name(instance.instance_id)
        return CellSandbox(
            spec=box,
            run_dir=str(self.run_dir),
            workspace=str(self.workspace),
            home_root=self.home_root,
            secrets_dir=secrets.dir if secrets is not None else None,
            image=image if docker else None,
            container=(
                container.container_name(self.home_root, self.cell_id, self.attempt)
                if docker
                else None
            ),
            labels=container.labels(self.home_root, self.cell_id, self.attempt) if docker else {},
        )


class AgentCommand(msgspec.Struct, frozen=True, kw_only=True):
    """What an arm runs, as its child sees it: ``argv`` started in ``cwd``, inside the
    cell's sandbox (:func:`launch_for` makes the run's command line of it)."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    timeout_s: float
    kill_grace_s: float
    # Started under the campaign's secrets wrapper (which runs outside the sandbox: it
    # reads the env files and the opencode auth file there and hands the child values).
    uses_secrets: bool = False
    # What must be visible inside for the agent to start (checked before the run).
    executables: list[str] = []
    # The arm's own read-only shares, and writable paths in the run dir besides the
    # workspace and the private dirs.
    read_only: list[str] = []
    read_write: list[str] = []


class Launch(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the run wrapper needs; the agent's stdin is /dev/null unless the script
    redirects it, and its stdout / stderr go to the arm's files in the run dir."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    timeout_s: float
    kill_grace_s: float
    # What the run can see (recorded in RunStarted); None: not said.
    sandbox: ev.SandboxView | None = None
    # Its network (arenad.sandbox.network): "host", "none" or "model" with its forwards.
    network: str = "host"
    forwards: list[str] = []
    # kind = "docker": the agent's container (removed by name when the run ends), and with
    # network "model" the forwards the wrapper listens on inside it.
    container: str | None = None
    container_forwards: list[str] | None = None


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    scored: bool
    not_scored_reason: str | None = None


class Arm(abc.ABC):
    # The agent's stdout and stderr files in the run dir (the reference's names).
    stdout_name: ClassVar[str]
    stderr_name: ClassVar[str]
    # Recovery reads only the agent's store and the ingest stream, so by default it goes
    # into the verdict's transaction (one append and one scheduling round less per cell).
    recovery_joins_verify: ClassVar[bool] = True
    # How the outcome rule names the agent ("agent exited 1", "driver exited 1").
    agent_noun: ClassVar[str] = "agent"
    # Why a session was captured (events.capture.AgentSessionCaptured.purpose).
    capture_purpose: ClassVar[Literal["solo", "command"]] = "solo"

    @abc.abstractmethod
    def prepare(self, ctx: ArmContext) -> AgentCommand:
        """Write the arm's inputs into the run dir and say what to run (blocking I/O: run
        it at the cell's site, :func:`prepare_step`, which confines it)."""

    def before_start(self, ctx: ArmContext) -> list[Event]:
        """Facts recorded with ``RunStarted``, in its transaction (blocking I/O); asked
        before :meth:`prepare`. Raises :class:`ProvenanceError` when the arm's identity
        cannot be established (the cell fails, nothing is launched)."""
        return []

    def watch_sources(self, ctx: ArmContext) -> list[WatchSource]:
        """What is ingested live while the agent runs: by default its stdout stream,
        a JSON-lines file the agent writes (source ``stdout``)."""
        return [file_source("stdout", ctx.run_dir / self.stdout_name)]

    async def end_events(
        self, site: Site, ctx: ArmContext, read_ingested: IngestReader
    ) -> list[Event]:
        """Facts recorded with the run's end, in its transaction."""
        return []

    async def infra_cause(
        self, site: Site, ctx: ArmContext, read_ingested: IngestReader
    ) -> InfraCause | None:
        """Whether a run that failed was failed by the model provider before any model step
        completed (:mod:`arenad.arms.evidence`): by default read off the structured error
        events of the agent's stdout stream (ingested), never its stderr."""
        return infra_cause(stream_objects(await read_ingested(), "stdout"))

    def outcome(self, state: CellState) -> Outcome:
        """Whether the run counts. The reference's rule for solo-like arms: exit 0, in time."""
        rc = state.run_rc
        if state.status == CellStatus.TIMED_OUT:
            return Outcome(scored=False, not_scored_reason=f"timed out (exit {rc})")
        if state.status == CellStatus.ABORTED and state.run_limit is not None:
            # The cell's own limit ended the run: the agent's failure, named.
            said = ev.LIMIT_REASONS.get(state.run_limit, f"{state.run_limit} limit")
            return Outcome(scored=False, not_scored_reason=f"{said} (exit {rc})")
        if state.status == CellStatus.ABORTED:
            return Outcome(scored=False, not_scored_reason=f"aborted (exit {rc})")
        if rc != 0:
            return Outcome(scored=False, not_scored_reason=f"{self.agent_noun} exited {rc}")
        return Outcome(scored=True)

    async def recover(
        self,
        site: Site,
        ctx: ArmContext,
        state: CellState,
        read_ingested: IngestReader,
    ) -> tuple[list[AppendRequest], ev.CellRecovered]:
        """Captures of the agent's own store and the CellRecovered that sums them. The
        default: the whole session tree of the cell's private store, and the reference's usage
        figures summed over the opencode stream's token parts."""
        usage = None
        found: list[ev.RejectedFigure] = []
        if state.run is None or state.run.stdout_path not in state.capped_outputs:
            # Sums over a stream the cap cut would pass for a whole run's: unknown instead.
            usage, found = checked_usage(await read_ingested())
        db_path = cell_paths(ctx.run_dir).opencode_db
        return await site.call_blocking(
            recover_tree,
            db_path,
            ctx.cell_id,
            ctx.attempt,
            self.capture_purpose,
            usage,
            str(ctx.run_dir),
            found,
        )

    async def after_recovered(
        self, site: Site, ctx: ArmContext, read_attempt: AttemptReader
    ) -> None:
        """What the arm leaves beside a recovered run (after its CellRecovered commit)."""
        return None


def stream_objects(ingested: Sequence[Recorded | Event], source: str) -> list[object]:
    """The parsed lines of one ingested source (a malformed line is kept as its text)."""
    out: list[object] = []
    for item in ingested:
        e = item.event if isinstance(item, Recorded) else item
        if isinstance(e, LineIngested | LineMalformed) and e.source == source:
            if isinstance(e, LineIngested) and e.encoding == "utf-8":
                try:
                    # JSON.parse's reading: a NaN / Infinity literal is not JSON.
                    out.append(js_parse(e.raw))
                    continue
                except ValueError:
                    pass
            out.append(e.raw)
    return out


def write_prompt(ctx: ArmContext, suffix: str) -> Path:
    ctx.prompt_file.write_text(ctx.spec.instance.problem_statement + suffix)
    return ctx.prompt_file


def launch_for(ctx: ArmContext, command: AgentCommand) -> Launch:
    """The run's command line for an arm's command: confined to the cell's sandbox, under
    the secrets wrapper when it uses secrets (blocking I/O: at the cell's site).

    With secrets the chain is ``wrapper -> bash (auth bootstrap) -> bwrap -> agent``: the
    bash that reads the auth file outside the sandbox ignores the run's group signals and
    stays bwrap's parent (never ``exec``), so a TERM to the run's group reaches the agent
    and the sandbox lives through the agent's grace.
    """
    net = network_plan(
        ctx.spec, home=ctx.sandbox.home_root, run_dir=str(ctx.run_dir), env=command.env
    )
    docker = ctx.spec.sandbox.kind == "docker"
    secrets = ctx.spec.secrets
    if docker and command.uses_secrets and secrets is not None:
        # The secrets wrapper's variables are named only in files arenad never opens, so
        # they cannot be passed into the container by name.
        raise SandboxError(
            '[sandbox] kind = "docker" does not take [secrets] yet: use kind = "bwrap"'
        )
    confined = confine(
        ctx.sandbox,
        command.argv,
        env=command.env,
        chdir=command.cwd,
        read_only=command.read_only,
        read_write=command.read_write,
        executables=command.executables,
        container_network=net.mode,
    )
    argv, cwd = confined.argv, command.cwd
    # A model-touching run gets the auth bootstrap with or without ``[secrets]`` (the
    # reference always prepends it): a user's ``opencode auth`` login reaches opencode in
    # the cell's private HOME either way (finding 9: it was skipped without ``[secrets]``).
    # A docker cell's HOME is inside its container, where the bootstrap's bash is not.
    if command.uses_secrets and not docker:
        line = shlex.join(confined.argv)
        script = f"trap '' TERM INT HUP\n{line}\nexit $?" if confined.sandboxed else f"exec {line}"
        wrapped = wrap_bash(secrets, script)
        argv, cwd = wrapped.argv, wrapped.cwd if wrapped.cwd is not None else cwd
    # Every child gets PWD equal to its real working directory: one inherited from the
    # daemon would name the daemon's directory (opencode trusts PWD over its cwd).
    env = {k: v for k, v in command.env.items() if k != "OLDPWD"}
    env["PWD"] = cwd
    view = msgspec.structs.replace(
        confined.view, network=net.mode, endpoints=[e.described for e in net.endpoints]
    )
    if docker:
        # The container has its own network (docker's flags, and with "model" the
        # wrapper's forwarder joins it); the wrapper, which talks to the engine, keeps the
        # host's.
        return Launch(
            argv=argv,
            cwd=cwd,
            env=env,
            timeout_s=command.timeout_s,
            kill_grace_s=command.kill_grace_s,
            sandbox=view,
            container=confined.view.container,
            container_forwards=net.forwards if net.mode == "model" else None,
        )
    if net.mode != "host" and (problem := netns.problem()) is not None:
        raise SandboxError(problem)
    return Launch(
        argv=argv,
        cwd=cwd,
        env=env,
        timeout_s=command.timeout_s,
        kill_grace_s=command.kill_grace_s,
        sandbox=view,
        network=net.mode,
        forwards=net.forwards,
    )


def q(value: str | Path) -> str:
    return shlex.quote(str(value))
