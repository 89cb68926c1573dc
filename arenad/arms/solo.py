"""The solo arm: one `opencode run` in the workspace (the reference's solo.sh).

The prompt goes in on stdin, not as a positional argument: opencode stores a
positional prompt wrapped in quotes, but stdin verbatim, and it reads stdin
whenever it is not a TTY, so stdin is always a file that ends.
"""

from __future__ import annotations

from pathlib import Path

from arenad.arms.base import (
    AgentCommand,
    Arm,
    ArmContext,
    IngestReader,
    q,
    stream_objects,
    write_prompt,
)
from arenad.arms.evidence import InfraCause, gateway_cause
from arenad.gateway import paths as gateway_paths
from arenad.gateway.cell import point_opencode
from arenad.ingest import WatchSource, file_source
from arenad.runs.executor import Site
from arenad.sandbox.cellenv import cell_paths
from arenad.sandbox.confine import install_roots
from events.base import Event
from events.cell import ProvenanceRecorded
from events.specs import SoloArm


class SoloArmRunner(Arm):
    stdout_name = "oc.jsonl"
    stderr_name = "oc.err"

    def __init__(self, spec: SoloArm) -> None:
        self.spec = spec

    def before_start(self, ctx: ArmContext) -> list[Event]:
        """The reference's solo identity (toArmIdentity): ``{repo: "opencode", commit: "cli"}``
        with the model as its one env knob, so the ledger's profile_commit is ``cli``."""
        return [
            ProvenanceRecorded(
                attempt=ctx.attempt,
                repo="opencode",
                commit="cli",
                env_knobs={"model": self.spec.model},
            )
        ]

    def prepare(self, ctx: ArmContext) -> AgentCommand:
        prompt = write_prompt(ctx, self.spec.prompt_suffix)
        args = [
            self.spec.opencode_bin,
            "run",
            "-m",
            self.spec.model,
            "--format",
            "json",
            # A fixed title skips opencode's extra title-generation model call and tags
            # the session with its cell.
            "--title",
            f"{ctx.cell_id}#{ctx.attempt}",
            *self.spec.extra_args,
        ]
        env = ctx.env
        uses_secrets = True
        if ctx.spec.gateway.kind == "gateway" and ctx.home_root and not ctx.dry_run:
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
            if pointed is not None:
                # The agent holds only its attempt's token: the upstream keys stay with the
                # gateway, so neither the secrets wrapper nor the env hands them in.
                env = {k: v for k, v in ctx.env.items() if k not in pointed.key_names}
                uses_secrets = False
        script = f"cd {q(ctx.workspace)} && exec {' '.join(q(a) for a in args)} < {q(prompt)}"
        ws = str(ctx.workspace)
        binary = self.spec.opencode_bin
        return AgentCommand(
            argv=["bash", "-c", script],
            cwd=ws,
            env=env,
            timeout_s=self.spec.timeout_s,
            kill_grace_s=self.spec.kill_grace_s,
            uses_secrets=uses_secrets,
            executables=[binary],
            # The opencode install is a tool chain the arm names: shown read-only.
            read_only=install_roots(binary, ctx.env.get("PATH", ""), ws),
        )

    def watch_sources(self, ctx: ArmContext) -> list[WatchSource]:
        """The stdout stream, and with the gateway its journal of this attempt's calls
        (source ``gateway``: a file of the daemon's home the agent cannot write)."""
        sources = super().watch_sources(ctx)
        if ctx.spec.gateway.kind == "gateway" and ctx.home_root:
            journal = gateway_paths.attempt_journal(
                Path(ctx.home_root), ctx.spec.campaign, ctx.cell_id, ctx.attempt
            )
            sources.append(file_source("gateway", journal))
        return sources

    async def infra_cause(
        self, site: Site, ctx: ArmContext, read_ingested: IngestReader
    ) -> InfraCause | None:
        """With the gateway, its records of the calls are the evidence (every call failed
        upstream); without gateway records, opencode's structured stream errors."""
        ingested = await read_ingested()
        calls = stream_objects(ingested, "gateway")
        if calls:
            return gateway_cause(calls)
        return await super().infra_cause(site, ctx, read_ingested)
