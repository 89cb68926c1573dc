"""The command arm: any agent CLI as an arm. argv placeholders: {ws} {prompt_file}
{run_dir} {model}; it runs in the workspace, under the secrets wrapper when it
touches a model."""

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
from arenad.errors import UserError
from arenad.gateway import paths as gateway_paths
from arenad.gateway.cell import point_command_env
from arenad.ingest import Mode, WatchSource, file_source
from arenad.runs.executor import Site
from arenad.sandbox.cellenv import cell_paths
from events.specs import CommandArm


class CommandArmRunner(Arm):
    stdout_name = "cmd.out"
    stderr_name = "cmd.err"
    capture_purpose = "command"

    def __init__(self, spec: CommandArm) -> None:
        self.spec = spec

    def prepare(self, ctx: ArmContext) -> AgentCommand:
        prompt = write_prompt(ctx, self.spec.prompt_suffix)
        values = {
            "ws": str(ctx.workspace),
            "prompt_file": str(prompt),
            "run_dir": str(ctx.run_dir),
            "model": self.spec.model or "",
        }
        try:
            args = [a.format(**values) for a in self.spec.argv]
        except (KeyError, ValueError, IndexError) as exc:
            raise UserError(f"arm {self.spec.name}: bad argv placeholder: {exc}") from None
        env = {**ctx.env, **self.spec.env}
        uses_secrets = self.spec.uses_model
        if self._through_gateway(ctx) and not ctx.dry_run:
            # The agent gets the conventional variables naming the gateway and its attempt's
            # token; the upstreams' keys stay with the gateway, so no secrets wrapper.
            pointed = point_command_env(
                Path(ctx.home_root),
                ctx.spec,
                ctx.cell_id,
                ctx.attempt,
                env,
                arm_env=self.spec.env,
                gateway_env=ctx.env,
                # The campaign's price table (the cell's opencode config) prices its model.
                config_path=Path(cell_paths(ctx.run_dir).opencode_config),
                model=self.spec.model,
                campaign_cap_usd=ctx.campaign_cap_usd,
                campaign_spent_usd=ctx.campaign_spent_usd,
            )
            env, uses_secrets = pointed.env, False
        if self.spec.uses_model:
            script = f"cd {q(ctx.workspace)} && exec {' '.join(q(a) for a in args)} < /dev/null"
            argv = ["bash", "-c", script]
        else:
            argv = args
        return AgentCommand(
            argv=argv,
            cwd=str(ctx.workspace),
            env=env,
            timeout_s=self.spec.timeout_s,
            kill_grace_s=self.spec.kill_grace_s,
            uses_secrets=uses_secrets,
            # Any CLI: what it needs beyond the system is the campaign's to share.
            executables=args[:1],
        )

    def _through_gateway(self, ctx: ArmContext) -> bool:
        return self.spec.uses_model and ctx.spec.gateway.kind == "gateway" and bool(ctx.home_root)

    def watch_sources(self, ctx: ArmContext) -> list[WatchSource]:
        """Its stdout, as JSON lines or (``output = "text"``) plain text lines; with the
        gateway its journal of this attempt's calls too (source ``gateway``)."""
        mode: Mode = "text" if self.spec.output == "text" else "lines"
        sources = [file_source("stdout", ctx.run_dir / self.stdout_name, mode)]
        if self._through_gateway(ctx):
            journal = gateway_paths.attempt_journal(
                Path(ctx.home_root), ctx.spec.campaign, ctx.cell_id, ctx.attempt
            )
            sources.append(file_source("gateway", journal))
        return sources

    async def infra_cause(
        self, site: Site, ctx: ArmContext, read_ingested: IngestReader
    ) -> InfraCause | None:
        """An arm with ``uses_model = false`` has no provider to blame: whatever it prints,
        its failure is its own (issue 27: failure laundering)."""
        if not self.spec.uses_model:
            return None
        # With the gateway, its records of the calls are the evidence (as for solo).
        calls = stream_objects(await read_ingested(), "gateway")
        if calls:
            return gateway_cause(calls)
        return await super().infra_cause(site, ctx, read_ingested)
