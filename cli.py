"""The `arenad` command line: wiring only. Each command calls one function of arenad.app
(the one door: nothing else of arenad is imported here), prints the result, and turns
user errors into one line on stderr and exit status 2."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import msgspec
import typer

from arenad import app as services
from arenad.app import (
    ArenadError,
    Home,
    StoreError,
    UserError,
    history_lines,
    recorded_to_json,
    resolve_home,
    status_table,
)

T = TypeVar("T")

app = typer.Typer(
    name="arenad",
    help="Run coding-agent evaluation arenas durably, from an append-only event log.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

_json = msgspec.json.Encoder()


class Context:
    home: Home


_ctx = Context()


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"arenad: {message}", err=True)
    raise typer.Exit(code)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a service; a user's mistake or a store refusal is one line, never a traceback."""
    try:
        return asyncio.run(coro)
    except UserError as exc:
        fail(str(exc))
    except StoreError as exc:
        fail(str(exc))
    except ArenadError as exc:
        fail(str(exc), 1)
    raise AssertionError("unreachable")


def command(summary: str, example: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Register a command whose --help is a one-line summary and a verbatim example."""

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        fn.__doc__ = f"{summary}\n\n\b\nExample:\n  {example}"
        name = fn.__name__.rstrip("_").replace("_", "-")
        return app.command(name=name, help=fn.__doc__)(fn)

    return decorate


@app.callback()
def root(
    home: Annotated[
        str | None,
        typer.Option(
            "--home",
            envvar="ARENAD_HOME",
            help="The arenad home (the store and the artifact tree). Default: ./arenad-home",
        ),
    ] = None,
) -> None:
    _ctx.home = resolve_home(home)


@command("Create the home and its event store (idempotent).", "arenad --home ./h init")
def init() -> None:
    applied = run(services.init_home(_ctx.home))
    typer.echo(f"arenad home {_ctx.home.root} ready ({len(applied)} migration(s) applied)")


@command("Apply pending migrations, or list them with --list.", "arenad migrate --list")
def migrate(
    list_: Annotated[
        bool, typer.Option("--list", help="Show applied and pending migrations; write nothing.")
    ] = False,
) -> None:
    if list_:
        for m in run(services.list_migrations(_ctx.home)):
            typer.echo(f"{'applied' if m.applied else 'pending'}  {m.name}  {m.checksum[:12]}")
        return
    applied = run(services.migrate(_ctx.home))
    names = f": {', '.join(applied)}" if applied else ""
    typer.echo(f"{len(applied)} migration(s) applied{names}")


@command("Show per-state counts and one row per cell.", "arenad status --json")
def status(
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    campaign: Annotated[str | None, typer.Option(help="Only this campaign's cells.")] = None,
    as_of: Annotated[
        int | None,
        typer.Option(help="Judge overdue cells at this time (ms since the epoch; default now)."),
    ] = None,
) -> None:
    # The one clock of `status`, read here at the edge: the projection is a pure function
    # of the log and this time.
    now_ms = as_of if as_of is not None else time.time_ns() // 1_000_000
    result = run(services.status(_ctx.home, campaign, now_ms))
    if json_:
        document = {
            "counts": result["counts"],
            "cells": result["cells"],
            "overdue": result["overdue"],
        }
        typer.echo(_json.encode(document).decode())
    else:
        typer.echo(status_table(result["count_list"], result["cells"], result["overdue"]))


@command(
    "Show the audit trail of one cell: every event as a timeline.",
    "arenad history demo:bug-1:SOLO:0",
)
def history(
    cell: Annotated[str, typer.Argument(help="The cell id (see `arenad status`).")],
    json_: Annotated[bool, typer.Option("--json", help="One JSON object per event.")] = False,
) -> None:
    recorded = run(services.history(_ctx.home, cell))
    if json_:
        for r in recorded:
            typer.echo(recorded_to_json(r).decode())
    else:
        typer.echo("\n".join(history_lines(recorded)))


@command("Print the event log, optionally following it.", "arenad events --after 100 --json")
def events(
    after: Annotated[int, typer.Option(help="Start after this sequence number.", min=0)] = 0,
    follow: Annotated[bool, typer.Option("--follow", help="Wait for new events.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    async def emit() -> None:
        # aclosing: when printing stops early (the reader closed the pipe, Ctrl-C), the
        # generator — and the store it holds open — is closed here, inside this task.
        # Left to asyncio.run's shutdown, that close fails ("coroutine ignored
        # GeneratorExit"), prints a traceback, and aiosqlite's threads keep the process alive.
        async with contextlib.aclosing(services.events(_ctx.home, after, follow)) as source:
            async for r in source:
                if json_:
                    line = recorded_to_json(r).decode()
                else:
                    line = history_lines([r])[0].replace("  #", f"  {r.stream}  #", 1)
                sys.stdout.write(line + "\n")
                if follow:
                    sys.stdout.flush()

    with contextlib.suppress(KeyboardInterrupt):
        run(emit())


@command("Walk the hash chain; name the first bad row (exit 1).", "arenad verify-log")
def verify_log() -> None:
    report = run(services.verify_log(_ctx.home))
    if report.ok:
        typer.echo(f"log ok: {report.rows} events, chain verified")
        return
    typer.echo(
        f"arenad: log tampered or damaged at seq {report.first_bad_seq}: {report.problem}", err=True
    )
    raise typer.Exit(1)


@command("Recreate every read model from the log.", "arenad rebuild")
def rebuild() -> None:
    count = run(services.rebuild(_ctx.home))
    typer.echo(f"read models rebuilt from {count} events")


@command(
    "Validate a campaign file and submit its cells (nothing is written on error).",
    "arenad submit examples/solo.toml",
)
def submit(
    campaign: Annotated[Path, typer.Argument(help="The campaign TOML file.")],
) -> None:
    result = run(services.submit_campaign(_ctx.home, campaign))
    typer.echo(
        f"campaign {result.campaign}: {len(result.added)} cell(s) submitted,"
        f" {result.already} already known"
    )


@command(
    "Run cells until stopped (or idle), writing every transition to the log.",
    "arenad daemon --max-parallel 4 --until-idle",
)
def daemon(
    max_parallel: Annotated[
        int | None, typer.Option(min=1, help="Cells running at once (default 4).")
    ] = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Exit 0 once no cell can make progress.")
    ] = False,
    hang_after: Annotated[
        float | None,
        typer.Option(min=1, help="Seconds of silence from a running cell before a hang event."),
    ] = None,
    hang_abort: Annotated[
        bool, typer.Option("--hang-abort", help="Abort a cell when a hang is detected.")
    ] = False,
    leave_running: Annotated[
        bool,
        typer.Option(
            "--leave-running",
            help="On SIGTERM/SIGINT leave running agents running; the next daemon adopts them.",
        ),
    ] = False,
    drain_timeout: Annotated[
        float,
        typer.Option(min=0, help="Seconds a stop waits for running cells to wind down."),
    ] = 60.0,
    infra_retries: Annotated[
        int,
        typer.Option(min=0, help="Automatic new attempts after an infrastructure failure."),
    ] = 2,
    retry_backoff: Annotated[
        float,
        typer.Option(min=0, help="Seconds before the first automatic retry (then doubling)."),
    ] = 5.0,
    proposer_worktree_root: Annotated[
        str | None,
        typer.Option(help="Where proposer shot worktrees live (default HOME/proposer-wt)."),
    ] = None,
    claude_projects_dir: Annotated[
        str | None,
        typer.Option(help="Claude Code's projects dir (default ~/.claude/projects)."),
    ] = None,
) -> None:
    services.setup_logging()
    options = services.DaemonOptions(
        max_parallel=max_parallel,
        until_idle=until_idle,
        hang_after_s=hang_after,
        hang_abort=hang_abort,
        leave_running=leave_running,
        drain_timeout_s=drain_timeout,
        retry=services.RetryPolicy(max_infra_retries=infra_retries, backoff_s=retry_backoff),
        proposer_worktree_root=proposer_worktree_root,
        claude_projects_dir=claude_projects_dir,
    )
    raise typer.Exit(run(services.run_daemon(_ctx.home, options)))


@command(
    "Ask for a cell to be aborted (a running agent is stopped, its group killed).",
    "arenad abort demo:bug-1:SOLO:0",
)
def abort(
    cell: Annotated[str, typer.Argument(help="The cell id.")],
    reason: Annotated[str, typer.Option(help="Why, for the audit trail.")] = "operator request",
) -> None:
    state = run(services.abort_cell(_ctx.home, cell, reason))
    typer.echo(f"{cell}: abort requested (state {state.status})")


@command(
    "Open a new attempt of a finished or failed cell; earlier attempts are kept.",
    "arenad retry demo:bug-1:SOLO:0",
)
def retry(
    cell: Annotated[str, typer.Argument(help="The cell id.")],
    reason: Annotated[str, typer.Option(help="Why, for the audit trail.")] = "operator retry",
) -> None:
    state = run(services.retry_cell(_ctx.home, cell, reason))
    typer.echo(f"{cell}: attempt {state.attempt} submitted")


@command("Pause a cell: the daemon starts no further step of it.", "arenad pause demo:bug-1:SOLO:0")
def pause(cell: Annotated[str, typer.Argument(help="The cell id.")]) -> None:
    run(services.pause_cell(_ctx.home, cell))
    typer.echo(f"{cell}: paused")


@command("Resume a paused cell.", "arenad resume demo:bug-1:SOLO:0")
def resume(cell: Annotated[str, typer.Argument(help="The cell id.")]) -> None:
    run(services.resume_cell(_ctx.home, cell))
    typer.echo(f"{cell}: resumed")


@command("Change how many cells a running daemon runs at once.", "arenad set-max-parallel 8")
def set_max_parallel(value: Annotated[int, typer.Argument(help="Cells at once.")]) -> None:
    run(services.set_max_parallel(_ctx.home, value))
    typer.echo(f"max-parallel set to {value}")


@command(
    "Run a demo campaign end to end (real opencode, scripted model) and show it.",
    "arenad --home ./demo-home demo",
)
def demo(
    opencode: Annotated[
        str | None, typer.Option(help="The opencode binary (default: the pinned install).")
    ] = None,
    reps: Annotated[int, typer.Option(min=1, help="Reps per instance.")] = 2,
) -> None:
    services.setup_logging()
    result = run(services.run_demo(_ctx.home, opencode, reps))
    summary = run(services.status(_ctx.home, result.campaign))
    typer.echo(status_table(summary["count_list"], summary["cells"]))
    typer.echo(f"\ncampaign file: {result.campaign_file}")
    typer.echo(f"demo repo:     {result.repo}")
    typer.echo(f"artifacts:     {result.artifacts}")
    typer.echo(f"audit trail:   arenad --home {_ctx.home.root} history <cell>")


@command(
    "Serve a scripted OpenAI-compatible model (dry-run a campaign's plumbing).",
    "arenad scripted-model --script examples/scripted-model/fix-bug.toml --port 8765",
)
def scripted_model(
    script: Annotated[Path, typer.Option(help="The script TOML file.")],
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0 = any free).")] = 0,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
) -> None:
    def ready(bound: int) -> None:
        typer.echo(f"scripted model listening on http://{host}:{bound}/v1", err=True)

    try:
        services.serve_scripted_model(script, host, port, ready)
    except UserError as exc:
        fail(str(exc))


@command(
    "Project the event log into a tangle.rollout.v1 ledger; print its stats.",
    "arenad project-ledger out/rollouts.jsonl --cell c1:inst:solo:0",
)
def project_ledger(
    out: Annotated[Path, typer.Argument(help="The ledger file to write (atomically).")],
    cell: Annotated[
        list[str] | None, typer.Option("--cell", help="Only these cells (repeatable).")
    ] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="The ledger's run_id.")] = None,
) -> None:
    stats = run(services.project_ledger(_ctx.home, out, cell or [], run_id))
    typer.echo(services.stats_json(stats))


@command(
    "Compare arms: resolve rates with 95% intervals, pass@k, cost, paired tests.",
    "arenad report --campaign demo --html report.html",
)
def report(
    campaign: Annotated[
        list[str] | None,
        typer.Option(
            "--campaign", metavar="NAME", help="Only this campaign (repeatable). Default: all."
        ),
    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    html: Annotated[
        Path | None,
        typer.Option("--html", metavar="FILE", help="Also write the report as one HTML page."),
    ] = None,
) -> None:
    result = run(services.report(_ctx.home, campaign or [], html))
    if json_:
        typer.echo(services.report_json(result).decode())
    else:
        services.print_report(result)


@command(
    "Record an operator's judge verdict for a cell's current attempt.",
    "arenad record-verdict c1:inst:solo:0 judge.json",
)
def record_verdict(
    cell: Annotated[str, typer.Argument(help="The cell id.")],
    verdict: Annotated[Path, typer.Argument(help="The verdict JSON file.")],
) -> None:
    event = run(services.record_verdict(_ctx.home, cell, verdict))
    typer.echo(f"verdict recorded for {cell} attempt {event.attempt}")


@command(
    "Capture proposer shot receipts and Claude transcripts into the log.",
    "arenad capture-proposer-shots --claude-projects-dir ~/.claude/projects",
)
def capture_proposer_shots(
    worktree_root: Annotated[
        Path | None,
        typer.Option(help="Where the shots' worktrees are. Default: <home>/proposer-wt"),
    ] = None,
    claude_projects_dir: Annotated[
        Path | None,
        typer.Option(help="Claude Code's projects dir. Default: ~/.claude/projects"),
    ] = None,
) -> None:
    paths, counts = run(
        services.capture_proposer_shots(
            _ctx.home, worktree_root=worktree_root, claude_projects_dir=claude_projects_dir
        )
    )
    typer.echo(
        f"{counts.receipts} receipt(s), {counts.transcripts} transcript(s) captured"
        f" from {paths.shots_dir}"
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
