"""The supervisor arm: the loops driver over the workspace (the seed's runSupervisorArm).

prepare() writes params.json, removes ``<ws>/.loops``, and runs the configured
driver argv (placeholders filled) with cwd = the loops checkout, the env knobs
plus LOOPS_BRAIN_LOG exported, under the secrets wrapper when configured. The
driver's stdout and stderr are files (driver.log / driver.err), not ingested:
what is ingested live is its run dir and brain.jsonl (``watch_sources``).
"""

from __future__ import annotations

import json
import shutil
import subprocess

from arenad.arms.base import Arm, ArmContext, Launch, Outcome, q, under_secrets
from arenad.ingest import WatchSource, file_source, supervisor_source
from events.cell import ProvenanceRecorded
from events.specs import SupervisorArm

# Read-only, and touches the store: opencode opens (creating and migrating) it first.
STORE_INIT_QUERY = "select count(*) from migration"
STORE_INIT_FAILED = "arenad: could not create the cell's opencode store before the driver"


class SupervisorArmRunner(Arm):
    stdout_name = "driver.log"
    stderr_name = "driver.err"

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

    def prepare(self, ctx: ArmContext) -> Launch:
        params_file = ctx.run_dir / "params.json"
        params_file.write_text(json.dumps(self.params(ctx), indent=1, ensure_ascii=False))
        shutil.rmtree(ctx.workspace / ".loops", ignore_errors=True)
        exports = [f"export {k}={q(v)}" for k, v in self.env_knobs(ctx).items()]
        script = "\n".join(
            [
                *exports,
                *self.store_init(),
                f"cd {q(self.spec.loops_repo)}",
                "exec " + " ".join(map(q, self.argv(ctx))),
            ]
        )
        argv, cwd = under_secrets(ctx, script)
        return Launch(
            argv=argv,
            cwd=cwd,
            env=ctx.env,
            timeout_s=self.spec.timeout_s,
            kill_grace_s=self.spec.kill_grace_s,
        )

    def watch_sources(self, ctx: ArmContext) -> list[WatchSource]:
        """The supervisor run dir (journal, workers, progress, state.json) and brain.jsonl;
        the driver's own stdout is a log, not a stream of facts."""
        return [supervisor_source(ctx.workspace), file_source("brain", ctx.run_dir / "brain.jsonl")]

    def provenance(self, ctx: ArmContext) -> ProvenanceRecorded:
        """``git rev-parse HEAD`` of the loops checkout ('unknown' when it is not a repo)."""
        try:
            out = subprocess.run(
                ["git", "-C", self.spec.loops_repo, "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=30,
                check=False,
            )
            commit = out.stdout.strip() if out.returncode == 0 else "unknown"
        except (OSError, subprocess.TimeoutExpired):
            commit = "unknown"
        return ProvenanceRecorded(
            attempt=ctx.attempt,
            repo=self.spec.loops_repo,
            commit=commit,
            env_knobs=dict(self.spec.env_knobs),
        )

    def outcome(
        self, ended: str, rc: int | None, ctx: ArmContext, sup_status: str | None = None
    ) -> Outcome:
        """The seed's rule: driver exit 0, in time, AND state.json status ``completed``."""
        base = super().outcome(ended, rc, ctx)
        if not base.scored:
            reason = (base.not_scored_reason or "").replace("agent exited", "driver exited")
            return Outcome(scored=False, not_scored_reason=reason)
        if sup_status != "completed":
            return Outcome(
                scored=False, not_scored_reason=f"supervisor state is {sup_status or 'missing'}"
            )
        return Outcome(scored=True)
