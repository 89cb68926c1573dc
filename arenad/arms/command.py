"""The command arm: any agent CLI as an arm. argv placeholders: {ws} {prompt_file}
{run_dir} {model}; it runs in the workspace, under the secrets wrapper when it
touches a model."""

from __future__ import annotations

from arenad.arms.base import AgentCommand, Arm, ArmContext, IngestReader, q, write_prompt
from arenad.arms.evidence import InfraCause
from arenad.errors import UserError
from arenad.ingest import Mode, WatchSource, file_source
from arenad.runs.executor import Site
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
            uses_secrets=self.spec.uses_model,
            # Any CLI: what it needs beyond the system is the campaign's to share.
            executables=args[:1],
        )

    def watch_sources(self, ctx: ArmContext) -> list[WatchSource]:
        """Its stdout, as JSON lines or (``output = "text"``) plain text lines."""
        mode: Mode = "text" if self.spec.output == "text" else "lines"
        return [file_source("stdout", ctx.run_dir / self.stdout_name, mode)]

    async def infra_cause(
        self, site: Site, ctx: ArmContext, read_ingested: IngestReader
    ) -> InfraCause | None:
        """An arm with ``uses_model = false`` has no provider to blame: whatever it prints,
        its failure is its own (issue 27: failure laundering)."""
        if not self.spec.uses_model:
            return None
        return await super().infra_cause(site, ctx, read_ingested)
