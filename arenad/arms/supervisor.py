"""The supervisor arm: the loops driver over the workspace (the reference's runSupervisorArm).

prepare() writes params.json, removes ``<ws>/.loops``, and runs the configured
driver argv (placeholders filled) with cwd = the loops checkout, the env knobs
plus LOOPS_BRAIN_LOG exported, under the secrets wrapper when configured. The
driver's stdout and stderr are files (driver.out / driver.err, joined into the reference's
driver.log when the run ends), not ingested:
what is ingested live is its run dir and brain.jsonl (``watch_sources``).

What it does differently from a solo agent: its provenance (the loops checkout's
commit) is recorded with the start; its run's end records state.json's summary
(``SupervisorOutcome``); a run counts only if the driver also says ``completed``; its
spend is its workers' sessions, joined on the cwds its workers reported; and its
``result.json`` (the reference's SupervisorArmResult) is written once it is recovered.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import msgspec

from arenad.arms.base import (
    AgentCommand,
    Arm,
    ArmContext,
    AttemptReader,
    IngestReader,
    Outcome,
    ProvenanceError,
    q,
    stream_objects,
)
from arenad.arms.documents import RESULT_JSON, result_json_bytes, write_documents_step
from arenad.arms.evidence import InfraCause, gateway_cause
from arenad.atomic import write_atomically
from arenad.cell import supervisor_figures as figures
from arenad.cell.machine import CellState
from arenad.gateway import paths as gateway_paths
from arenad.gateway.cell import point_opencode
from arenad.ingest.watcher import (
    GlobSelection,
    RootResolver,
    WatchSource,
    file_source,
    first_subdirectory,
)
from arenad.js import js_stringify_indented
from arenad.materialize import gitsafe
from arenad.recovery.capture import capture_worker_sessions, spend_figures, spend_gap
from arenad.recovery.opencode_spend import sup_spend
from arenad.recovery.opencode_store import StoreUnavailable
from arenad.runs.executor import Site, Tools
from arenad.sandbox.cellenv import cell_paths
from arenad.sandbox.confine import install_roots
from arenad.store.base import AppendRequest
from events import cell as ev
from events.base import Event, Recorded
from events.capture import AgentSessionCaptured, WorkerCwdUnmatched
from events.cell import ProvenanceRecorded
from events.specs import SupervisorArm
from events.streams import capture_stream

# Read-only, and touches the store: opencode opens (creating and migrating) it first.
STORE_INIT_QUERY = "select count(*) from migration"
STORE_INIT_FAILED = "arenad: could not create the cell's opencode store before the driver"


def supervisor_selection() -> GlobSelection:
    """A loops supervisor run dir (rollout-v1 §6).

    Lines: ``journal.jsonl``, ``workers/*.ndjson`` (but not the
    ``workers/*.inbox.ndjson`` inboxes, which are not workers), ``progress.ndjson``.
    Snapshot: ``state.json``.
    """
    return GlobSelection(
        lines=("journal.jsonl", "workers/*.ndjson", "progress.ndjson"),
        snapshots=("state.json",),
        exclude=("workers/*.inbox.ndjson",),
    )


def supervisor_run_dir(workspace: Path) -> RootResolver:
    """``<ws>/.agent/supervisor/<id>/``, else ``<ws>/.loops/supervisor/<id>/``.

    Like the reference readers: try ``.agent`` then ``.loops``, take the first
    subdirectory. The directory appears only once the driver started; a watcher
    keeps resolving until it does, then stays on the directory it found.
    """
    return first_subdirectory(
        workspace / ".agent" / "supervisor", workspace / ".loops" / "supervisor"
    )


def supervisor_source(workspace: Path, name: str = "supervisor") -> WatchSource:
    """The supervisor run dir under ``workspace``, discovered when it appears."""
    return WatchSource(
        name, supervisor_run_dir(workspace), supervisor_selection(), confine=workspace
    )


DRIVER_LOG = "driver.log"


class SupervisorArmRunner(Arm):
    # Two files while it runs (the output cap is per file); the reference's one driver.log,
    # stdout then stderr, is joined from them when the run ends (join_driver_log_step).
    stdout_name = "driver.out"
    stderr_name = "driver.err"
    agent_noun = "driver"
    # result.json is written after the recovery commit, from what it recorded.
    recovery_joins_verify = False

    def __init__(self, spec: SupervisorArm) -> None:
        self.spec = spec

    def params(self, ctx: ArmContext) -> dict[str, object]:
        s = self.spec
        return {
            "task": ctx.spec.instance.problem_statement,
            "workspaceDir": str(ctx.workspace),
            "budget": s.budget,
            "verifyCmd": ctx.spec.instance.verify_cmd,
            "workerModel": s.worker_model,
            "driverModel": s.driver_model,
            "maxSandboxes": s.max_sandboxes,
            "maxUsd": s.max_usd,
            "maxDepth": s.max_depth,
        }

    def env_knobs(self, ctx: ArmContext) -> dict[str, str]:
        return {**self.spec.env_knobs, "LOOPS_BRAIN_LOG": str(ctx.run_dir / "brain.jsonl")}

    def argv(self, ctx: ArmContext) -> list[str]:
        s = self.spec
        values = {
            "shim": s.shim_path,
            "extension": s.extension_path,
            "ws": str(ctx.workspace),
            "params": str(ctx.run_dir / "params.json"),
            "run_dir": str(ctx.run_dir),
            "loops_repo": s.loops_repo,
        }
        return [arg.format(**values) for arg in s.driver_cmd]

    def store_init(self) -> list[str]:
        """The launch script's lines that create and migrate the cell's opencode store
        (``OPENCODE_DB`` in the cell env) before the driver starts its workers at once.

        A failure is not fatal (the workers would create the store themselves, as without
        this step); it is reported on driver.err.
        """
        if not self.spec.init_opencode_store:
            return []
        binary = q(self.spec.opencode_bin)
        return [
            f"{binary} db {q(STORE_INIT_QUERY)} > /dev/null"
            f" || echo {q(STORE_INIT_FAILED)}' (exit '$?')' >&2"
        ]

    def prepare(self, ctx: ArmContext) -> AgentCommand:
        params_file = ctx.run_dir / "params.json"
        # The reference's JSON.stringify(params, null, 1): ``"maxUsd": 8``, never ``8.0``.
        params_file.write_text(js_stringify_indented(self.params(ctx), 1))
        shutil.rmtree(ctx.workspace / ".loops", ignore_errors=True)
        # Where newer drivers keep the same state: a rerun must not read the last one's.
        shutil.rmtree(ctx.workspace / ".agent" / "supervisor", ignore_errors=True)
        # The brain log is the one file of the run dir the driver writes: made here, so
        # that it can be shown writable in a sandbox whose run dir is read-only.
        brain = ctx.run_dir / "brain.jsonl"
        brain.touch()
        exports = [f"export {k}={q(v)}" for k, v in self.env_knobs(ctx).items()]
        driver = self.argv(ctx)
        script = "\n".join(
            [
                *exports,
                *self.store_init(),
                f"cd {q(self.spec.loops_repo)}",
                # No PWD for the driver: the workers it starts in their own clones inherit
                # its environment, and opencode takes its project from $PWD before its real
                # cwd; a PWD naming the loops checkout would send them all there.
                "unset PWD OLDPWD",
                "exec " + " ".join(map(q, driver)),
            ]
        )
        env, uses_secrets = self._pointed_env(ctx)
        ws = str(ctx.workspace)
        binary = self.spec.opencode_bin
        return AgentCommand(
            argv=["bash", "-c", script],
            cwd=ws,
            env=env,
            timeout_s=self.spec.timeout_s,
            kill_grace_s=self.spec.kill_grace_s,
            uses_secrets=uses_secrets,
            # The store init may fail (reported, not fatal); the driver must start.
            executables=driver[:1],
            # The driver and its workers see the loops checkout read-only, and the opencode
            # install the workers run.
            read_only=[self.spec.loops_repo, *install_roots(binary, ctx.env.get("PATH", ""), ws)],
            read_write=[str(brain)],
        )

    def _pointed_env(self, ctx: ArmContext) -> tuple[dict[str, str], bool]:
        """(the driver's env, whether it runs under the secrets wrapper).

        With the gateway, the cell's opencode config is pointed at it as a solo arm's is
        (:func:`arenad.gateway.cell.point_opencode`): the workers the driver starts inherit
        its env, whose ``OPENCODE_CONFIG`` is that copy, so each provider's ``baseURL`` names
        the gateway and its ``apiKey`` the attempt's token. The driver's own model is pointed
        the same way when its provider is one of the config's; then no key enters the cell
        (no wrapper, the key variables dropped). A driver whose model's provider the config
        does not name keeps the wrapper, so it still reaches its provider itself."""
        if not self._through_gateway(ctx) or ctx.dry_run:
            return ctx.env, True
        pointed = point_opencode(
            Path(ctx.home_root),
            Path(cell_paths(ctx.run_dir).opencode_config),
            ctx.spec,
            ctx.cell_id,
            ctx.attempt,
            ctx.env,
            campaign_cap_usd=ctx.campaign_cap_usd,
            campaign_spent_usd=ctx.campaign_spent_usd,
        )
        if pointed is None:
            return ctx.env, True
        driver_provider = self.spec.driver_model.partition("/")[0]
        if driver_provider not in pointed.providers:
            return ctx.env, True
        return {k: v for k, v in ctx.env.items() if k not in pointed.key_names}, False

    def _through_gateway(self, ctx: ArmContext) -> bool:
        return ctx.spec.gateway.kind == "gateway" and bool(ctx.home_root)

    def watch_sources(self, ctx: ArmContext) -> list[WatchSource]:
        """The supervisor run dir (journal, workers, progress, state.json) and brain.jsonl;
        the driver's own stdout is a log, not a stream of facts. With the gateway, its
        journal of this attempt's calls too (source ``gateway``)."""
        sources = [
            supervisor_source(ctx.workspace),
            file_source("brain", ctx.run_dir / "brain.jsonl"),
        ]
        if self._through_gateway(ctx):
            journal = gateway_paths.attempt_journal(
                Path(ctx.home_root), ctx.spec.campaign, ctx.cell_id, ctx.attempt
            )
            sources.append(file_source("gateway", journal))
        return sources

    def before_start(self, ctx: ArmContext) -> list[Event]:
        return [self.provenance(ctx)]

    def provenance(self, ctx: ArmContext) -> ProvenanceRecorded:
        """``git rev-parse HEAD`` of the loops checkout, through the hardened git (the
        reference's armProvenance, which throws when it fails: so does this,
        :class:`ProvenanceError`)."""
        repo = self.spec.loops_repo
        commit = gitsafe.head_commit_blocking(repo)
        if not commit:
            raise ProvenanceError(
                f"{repo}: git rev-parse HEAD gave no commit (not a git checkout?)"
            )
        return ProvenanceRecorded(
            attempt=ctx.attempt,
            repo=repo,
            commit=commit,
            env_knobs=dict(self.spec.env_knobs),
        )

    async def end_events(
        self, site: Site, ctx: ArmContext, read_ingested: IngestReader
    ) -> list[Event]:
        """state.json's summary and the journal's counts at run end (the reference's
        parseSupervisorArtifacts)."""
        ingested = await read_ingested()
        summary = figures.summarize(ingested)
        sup_dir = await site.call_blocking(supervisor_dir_step, str(ctx.workspace))
        await site.call_blocking(join_driver_log_step, str(ctx.run_dir))
        return [
            ev.SupervisorOutcome(
                attempt=ctx.attempt,
                sup_run_dir=sup_dir,
                status=summary.status,
                verdict=summary.verdict,
                delivered=summary.delivered,
                spent_tokens=summary.spent_tokens,
                spent_usd=summary.spent_usd,
                # Nothing ingested: unknown, not 0 (the ledger's figures are null then).
                spawned=summary.spawned if ingested else None,
                workers=summary.workers if ingested else None,
                settled=summary.settled if ingested else None,
                subtasks=(
                    summary.subtasks if ingested and figures.storable(summary.subtasks) else None
                ),
            )
        ]

    async def infra_cause(
        self, site: Site, ctx: ArmContext, read_ingested: IngestReader
    ) -> InfraCause | None:
        """From the model gateway's records of its calls only (every call failed upstream,
        as for solo). Without them, never: the driver's model calls leave no structured
        error events (its brain log holds per-request stats), and its stderr is written by
        processes the agent runs, so it is no evidence (:mod:`arenad.arms.evidence`)."""
        calls = stream_objects(await read_ingested(), "gateway")
        return gateway_cause(calls) if calls else None

    def outcome(self, state: CellState) -> Outcome:
        """The reference's rule: driver exit 0, in time, AND state.json status ``completed``."""
        base = super().outcome(state)
        if not base.scored:
            return base
        sup_status = state.supervisor.status if state.supervisor is not None else None
        if sup_status != "completed":
            return Outcome(
                scored=False, not_scored_reason=f"supervisor state is {sup_status or 'missing'}"
            )
        return Outcome(scored=True)

    async def recover(
        self,
        site: Site,
        ctx: ArmContext,
        state: CellState,
        read_ingested: IngestReader,
    ) -> tuple[list[AppendRequest], ev.CellRecovered]:
        """Worker sessions joined on the ingested ``started.cwd`` values (the reference's
        recoverSupSpend): captures and unmatched cwds on the capture stream, and figures."""
        ingested = await read_ingested()
        cwds = figures.worker_cwds(ingested)
        db_path = cell_paths(ctx.run_dir).opencode_db
        if not cwds:
            # No worker started: the reference reads no store then (its figures are 0).
            return recovered_events(ctx.cell_id, ctx.attempt, db_path, ingested, cwds, ([], []))
        result = await site.call_blocking(
            capture_worker_sessions, db_path, cwds, ctx.attempt, str(ctx.run_dir)
        )
        return recovered_events(ctx.cell_id, ctx.attempt, db_path, ingested, cwds, result)

    async def after_recovered(
        self, site: Site, ctx: ArmContext, read_attempt: AttemptReader
    ) -> None:
        doc = result_json_bytes(ctx.spec, await read_attempt())
        await site.call_blocking(write_documents_step, str(ctx.run_dir), {RESULT_JSON: doc})


def supervisor_dir_step(tools: Tools, workspace: str) -> str | None:
    """Site step: where the driver's run dir is (None if it never made one)."""
    found = supervisor_run_dir(Path(workspace))()
    return str(found.resolve()) if found is not None else None


def join_driver_log_step(tools: Tools, run_dir: str) -> None:
    """Site step: the reference's ``driver.log`` (``driver.stdout + driver.stderr``), written
    atomically from the run's two output files once it ended. Idempotent (a daemon that
    dies before the run's end is recorded joins them again, to the same bytes). A run
    started by an arenad that wrote stdout to driver.log itself has no driver.out: left
    as it is."""
    root = Path(run_dir)
    try:
        out = (root / SupervisorArmRunner.stdout_name).read_bytes()
    except FileNotFoundError:
        return
    try:
        err = (root / SupervisorArmRunner.stderr_name).read_bytes()
    except FileNotFoundError:
        err = b""
    write_atomically(root / DRIVER_LOG, out + err)


def recovered_events(
    cell_id: str,
    attempt: int,
    db_path: str,
    ingested: Sequence[Recorded | Event],
    cwds: list[str],
    result: tuple[list[AgentSessionCaptured], list[str]] | StoreUnavailable,
) -> tuple[list[AppendRequest], ev.CellRecovered]:
    """The capture events and the CellRecovered of a supervisor attempt (pure)."""
    capture_events: list[Event]
    if isinstance(result, StoreUnavailable):
        captures: list[AgentSessionCaptured] | None = None
        capture_events = [result.event(attempt)]
        gap: str | None = result.error
    else:
        captures, unmatched = result
        capture_events = [
            *captures,
            *(WorkerCwdUnmatched(attempt=attempt, cwd=c) for c in unmatched),
        ]
        gap = None
    summary = figures.summarize(ingested)
    sup = sup_spend(captures, cwds)
    base, found = spend_figures(captures) if captures is not None else (ev.SpendFigures(), [])
    spend = msgspec.structs.replace(
        base,
        worker_tok_journal=figures.worker_tok_journal(ingested),
        worker_cwds=sup.worker_cwds,
        worker_sessions=sup.worker_sessions,
        worker_tok_sqlite=sup.worker_tok_sqlite,
        worker_tok_in=sup.worker_tok_in,
        worker_tok_out=sup.worker_tok_out,
        spent_tokens=summary.spent_tokens,
        spent_usd=summary.spent_usd,
    )
    stream = capture_stream(cell_id, attempt)
    requests = [AppendRequest(stream, 0, capture_events)] if capture_events else []
    return requests, ev.CellRecovered(
        attempt=attempt,
        store_path=db_path,
        store_available=captures is not None,
        gap=gap,
        spend=spend,
        spend_gap=spend_gap(found),
        rejected=found,
    )
