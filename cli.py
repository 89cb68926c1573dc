"""The `arenad` command line: wiring only. Each command calls one function of arenad.app
(the one door: nothing else of arenad is imported here), prints the result, and turns
errors into one line on stderr and the exit status of the README's table:

    0   ok
    1   runtime failure: the store cannot be read or written (full, read-only, damaged,
        tampered), a process could not be run, the daemon stopped on a fatal error
    2   user error: a file, argument or environment variable given is wrong (the line
        names it); nothing was written
    86  an injected crash (ARENAD_FAULT, for tests)
"""

from __future__ import annotations

import asyncio
import contextlib
import math
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


EXIT_RUNTIME = 1
EXIT_USER = 2


def echo(text: str, *, err: bool = False) -> None:
    """Print text that may hold what an agent wrote: control characters escaped."""
    typer.echo(services.printable(text, newlines=True), err=err)


def echo_json(data: bytes) -> None:
    typer.echo(services.json_printable(data).decode())


def fail(message: str, code: int = EXIT_USER) -> None:
    echo(f"arenad: {message}", err=True)
    raise typer.Exit(code)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a service; a user's mistake (2) or a runtime failure (1: the store refused, a
    process could not run) is one line, never a traceback. A store that cannot be written
    is a runtime failure whether it filled before the command or during it."""
    try:
        return asyncio.run(coro)
    except UserError as exc:
        fail(str(exc))
    except ArenadError as exc:
        fail(str(exc), EXIT_RUNTIME)
    except BrokenPipeError:
        # The reader went away (`arenad events | head`): click's rule, stop quietly, exit 1.
        raise
    except OSError as exc:
        # The machine refused (a full disk, a permission): a runtime failure, in one line.
        where = f"{exc.filename}: " if exc.filename else ""
        fail(f"{where}{exc.strerror or exc}", EXIT_RUNTIME)
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


@command(
    "Show per-state counts and one row per cell (--summary: counts only).",
    "arenad status --state failed --limit 20",
)
def status(
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    campaign: Annotated[str | None, typer.Option(help="Only this campaign's cells.")] = None,
    as_of: Annotated[
        int | None,
        typer.Option(help="Judge overdue cells at this time (ms since the epoch; default now)."),
    ] = None,
    state: Annotated[
        str | None, typer.Option(metavar="STATE", help="Only the cells in this state.")
    ] = None,
    limit: Annotated[int | None, typer.Option(metavar="N", help="At most N cell rows.")] = None,
    summary: Annotated[
        bool, typer.Option("--summary", help="Counts per state and campaign; no cell rows.")
    ] = False,
    wide: Annotated[
        bool, typer.Option("--wide", help="Print each reason whole (else cut in its middle).")
    ] = False,
) -> None:
    # The one clock of `status`, read here at the edge: the projection is a pure function
    # of the log and this time.
    now_ms = as_of if as_of is not None else time.time_ns() // 1_000_000
    result = run(
        services.status(
            _ctx.home,
            campaign,
            None if summary else now_ms,
            state=state,
            limit=limit,
            summary=summary,
        )
    )
    if json_:
        keys = ("counts", "cells", "campaigns", "overdue", "more", "by_campaign", "by_arm")
        doc = {k: result[k] for k in keys}
        echo_json(_json.encode(doc))
    else:
        echo(
            status_table(
                result["count_list"],
                result["cells"],
                result["campaigns"],
                result["overdue"],
                wide=wide,
                more=result["more"],
                by_campaign=result["by_campaign"],
                by_arm=result["by_arm"],
            )
        )


@command(
    "One line per campaign: cells by state, spend and cap, first and last event.",
    "arenad campaigns --json",
)
def campaigns(
    json_: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
) -> None:
    figures = run(services.campaigns(_ctx.home))
    if json_:
        echo_json(_json.encode(figures))
    else:
        echo(services.campaigns_table(figures))


@command(
    "Change a campaign's spend cap in USD; a running daemon follows it.",
    "arenad set-budget swe-verified 80",
)
def set_budget(
    campaign: Annotated[str, typer.Argument(help="The campaign's name.")],
    usd: Annotated[float, typer.Argument(help="The new cap, in USD.")],
    abort_running: Annotated[
        bool | None,
        typer.Option(
            "--abort-running/--no-abort-running",
            help="Whether reaching the cap also aborts running cells (default: as it was).",
        ),
    ] = None,
) -> None:
    budget = run(services.set_budget(_ctx.home, campaign, usd, abort_running))
    typer.echo(f"campaign {campaign}: spend cap ${budget.cap_usd:g}")


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
        echo("\n".join(history_lines(recorded)))


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
                    stream = services.printable(r.stream)
                    line = history_lines([r])[0].replace("  #", f"  {stream}  #", 1)
                sys.stdout.write(line + "\n")
                if follow:
                    sys.stdout.flush()

    with contextlib.suppress(KeyboardInterrupt):
        run(emit())


@command(
    "Walk the hash chain; name the first bad row (exit 1).",
    "arenad verify-log --anchor ~/backup/arenad.anchor",
)
def verify_log(
    anchor: Annotated[
        Path | None,
        typer.Option(
            "--anchor",
            metavar="FILE",
            help="A file kept elsewhere: the log must still hold the head it records"
            " (catches deleted newest rows with a rewritten head); then it records today's.",
        ),
    ] = None,
) -> None:
    checked = run(services.verify_log(_ctx.home, anchor))
    report = checked.report
    if report.ok:
        note = f"; {checked.anchor}" if checked.anchor else ""
        typer.echo(f"log ok: {report.rows} events, chain verified{note}")
        return
    echo(
        f"arenad: log tampered or damaged at seq {report.first_bad_seq}: {report.problem}", err=True
    )
    raise typer.Exit(EXIT_RUNTIME)


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
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Validate everything and show what would be created; append nothing."
        ),
    ] = False,
) -> None:
    progress = _progress("cells checked" if dry_run else "cells written")
    result = run(services.submit_campaign(_ctx.home, campaign, dry_run=dry_run, progress=progress))
    if progress is not None:
        sys.stderr.write("\r\033[K")
    echo("\n".join(services.submit_lines(result)))


def _progress(what: str) -> Callable[[int, int], None] | None:
    """A progress line on a terminal's stderr (nothing when it is not one)."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        sys.stderr.write(f"\r{done}/{total} {what}")
        sys.stderr.flush()

    return show


@command(
    "Run cells until stopped (or idle), writing every transition to the log.",
    "arenad daemon --max-parallel 4 --until-idle",
)
def daemon(
    max_parallel: Annotated[
        int | None, typer.Option(min=1, help="Cells running at once (default 4).")
    ] = None,
    until_idle: Annotated[
        bool,
        typer.Option(
            "--until-idle",
            help="Exit once no cell can make progress (3: held at a spend cap, cells left).",
        ),
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
    max_usd: Annotated[
        float | None,
        typer.Option(
            "--max-usd",
            help="A spend cap (USD) on every campaign; a campaign's own lower cap wins.",
        ),
    ] = None,
    executor: Annotated[
        str,
        typer.Option(help="Where cells run: local (this machine) or ray (a Ray cluster's nodes)."),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(help="The Ray cluster to join (default: $RAY_ADDRESS, else the local one)."),
    ] = None,
    ray_heartbeat_s: Annotated[
        float,
        typer.Option(help="Seconds a Ray node may go unheard before its run is lost."),
    ] = 30.0,
    campaign: Annotated[
        list[str] | None,
        typer.Option(
            "--campaign", metavar="NAME", help="Run only this campaign's cells (repeatable)."
        ),
    ] = None,
) -> None:
    if max_usd is not None and not (math.isfinite(max_usd) and max_usd > 0):
        fail(f"--max-usd {max_usd} must be a finite number of USD > 0")
    services.setup_logging()
    options = services.DaemonOptions(
        max_usd=max_usd,
        max_parallel=max_parallel,
        until_idle=until_idle,
        hang_after_s=hang_after,
        hang_abort=hang_abort,
        leave_running=leave_running,
        campaigns=tuple(campaign or ()),
        drain_timeout_s=drain_timeout,
        retry=services.RetryPolicy(max_infra_retries=infra_retries, backoff_s=retry_backoff),
        proposer_worktree_root=proposer_worktree_root,
        claude_projects_dir=claude_projects_dir,
        # A live line on a terminal; plain log lines otherwise.
        progress=sys.stderr.isatty(),
    )
    served = services.serve_daemon(
        _ctx.home,
        options,
        executor=executor,
        ray_address=ray_address,
        ray_heartbeat_s=ray_heartbeat_s,
    )
    raise typer.Exit(run(served))


_CampaignOpt = Annotated[
    str | None,
    typer.Option(metavar="NAME", help="Every cell of this campaign (one transaction)."),
]
_ControlWhereOpt = Annotated[
    str | None,
    typer.Option(
        metavar="|".join(services.CONTROL_WHERE),
        help="With --campaign: only the cells in this state (queued: not started).",
    ),
]
_AllowEmptyOpt = Annotated[
    bool, typer.Option("--allow-empty", help="No cell matching is not an error.")
]


def _control(
    action: str,
    cell: str | None,
    campaign: str | None,
    where: str | None,
    allow_empty: bool,
    reason: str = "operator request",
) -> bool:
    """``abort|pause|resume --campaign``: True when it was that (and is done); False for
    the one-cell form. One cell and a campaign at once is a usage error."""
    if campaign is None:
        if where is not None or cell is None:
            fail(f"{action} takes a cell id, or --campaign NAME [--where STATE]")
        return False
    if cell is not None:
        fail(f"{action} takes a cell id, or --campaign NAME [--where STATE] (not both)")
    done = run(
        services.control_campaign(
            _ctx.home,
            campaign,
            action,  # type: ignore[arg-type]  # one of the three commands below
            where=where,
            reason=reason,
            allow_empty=allow_empty,
        )
    )
    narrowed = f" (--where {where})" if where is not None else ""
    typer.echo(f"campaign {campaign}: {action} recorded for {len(done)} cell(s){narrowed}")
    return True


@command(
    "Abort a cell, or a campaign's cells (running agents are stopped).",
    "arenad abort --campaign demo --where queued",
)
def abort(
    cell: Annotated[str | None, typer.Argument(help="The cell id.")] = None,
    reason: Annotated[str, typer.Option(help="Why, for the audit trail.")] = "operator request",
    campaign: _CampaignOpt = None,
    where: _ControlWhereOpt = None,
    allow_empty: _AllowEmptyOpt = False,
) -> None:
    if _control("abort", cell, campaign, where, allow_empty, reason):
        return
    assert cell is not None
    state = run(services.abort_cell(_ctx.home, cell, reason))
    typer.echo(f"{cell}: abort requested (state {state.status})")


@command(
    "A new attempt of a failed or finished cell, or of a campaign's (--where).",
    "arenad retry demo:bug-1:SOLO:0",
)
def retry(
    cell: Annotated[str | None, typer.Argument(help="The cell id.")] = None,
    reason: Annotated[str, typer.Option(help="Why, for the audit trail.")] = "operator retry",
    campaign: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="Retry every cell of this campaign that --where picks."),
    ] = None,
    where: Annotated[
        str | None,
        typer.Option(metavar="|".join(services.RETRY_WHERE), help="Which cells (with --campaign)."),
    ] = None,
    allow_empty: Annotated[
        bool, typer.Option("--allow-empty", help="No cell matching is not an error.")
    ] = False,
) -> None:
    if campaign is None and where is None:
        if cell is None:
            fail("give a cell id, or --campaign NAME --where " + "|".join(services.RETRY_WHERE))
        assert cell is not None
        state = run(services.retry_cell(_ctx.home, cell, reason))
        typer.echo(f"{cell}: attempt {state.attempt} submitted")
        return
    if cell is not None or campaign is None or where is None:
        fail("retry takes a cell id, or --campaign NAME with --where (not both)")
    assert campaign is not None and where is not None
    retried = run(
        services.retry_campaign(
            _ctx.home,
            campaign,
            where,  # type: ignore[arg-type]  # checked against RETRY_WHERE by the service
            reason,
            allow_empty=allow_empty,
        )
    )
    typer.echo(f"campaign {campaign}: {len(retried)} cell(s) retried (--where {where})")


@command(
    "Re-grade stored patches (verify and judge again, the agent not re-run).",
    "arenad reverify --campaign demo --where verify-failed --verify-cmd 'pytest -q'",
)
def reverify(
    cells: Annotated[list[str] | None, typer.Argument(help="Cell ids.")] = None,
    campaign: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="Re-grade this campaign's cells (--where narrows)."),
    ] = None,
    where: Annotated[
        str | None,
        typer.Option(metavar="|".join(services.RETRY_WHERE), help="Which cells (with --campaign)."),
    ] = None,
    verify_cmd: Annotated[
        str | None,
        typer.Option("--verify-cmd", help="Verify with this command (default: the campaign's)."),
    ] = None,
    reason: Annotated[str, typer.Option(help="Why, for the audit trail.")] = "operator reverify",
) -> None:
    results = run(
        services.reverify(
            _ctx.home,
            cells or [],
            campaign=campaign,
            where=where,
            verify_cmd=verify_cmd,
            reason=reason,
        )
    )
    for line in services.reverify_lines(results):
        typer.echo(services.printable(line))


@command(
    "Pause a cell or a campaign's cells: no further step of them starts.",
    "arenad pause --campaign demo",
)
def pause(
    cell: Annotated[str | None, typer.Argument(help="The cell id.")] = None,
    campaign: _CampaignOpt = None,
    where: _ControlWhereOpt = None,
    allow_empty: _AllowEmptyOpt = False,
) -> None:
    if _control("pause", cell, campaign, where, allow_empty):
        return
    assert cell is not None
    run(services.pause_cell(_ctx.home, cell))
    typer.echo(f"{cell}: paused")


@command("Resume a paused cell, or a campaign's paused cells.", "arenad resume --campaign demo")
def resume(
    cell: Annotated[str | None, typer.Argument(help="The cell id.")] = None,
    campaign: _CampaignOpt = None,
    where: _ControlWhereOpt = None,
    allow_empty: _AllowEmptyOpt = False,
) -> None:
    if _control("resume", cell, campaign, where, allow_empty):
        return
    assert cell is not None
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
    executor: Annotated[
        str,
        typer.Option(help="local, or ray: a Ray cluster of this machine, started for the demo."),
    ] = "local",
) -> None:
    services.setup_logging()
    result = run(services.run_demo(_ctx.home, opencode, reps, executor))
    summary = run(services.status(_ctx.home, result.campaign))
    echo(status_table(summary["count_list"], summary["cells"]))
    typer.echo(f"\ncampaign file: {result.campaign_file}")
    typer.echo(f"demo repo:     {result.repo}")
    typer.echo(f"artifacts:     {result.artifacts}")
    typer.echo(f"audit trail:   arenad --home {_ctx.home.root} history <cell>")
    typer.echo(f"the arms compared: arenad --home {_ctx.home.root} report")
    typer.echo(f"all of it, in a browser: arenad --home {_ctx.home.root} view")


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
    campaign: Annotated[
        str | None,
        typer.Option(
            "--campaign", help="Only this campaign's cells (no other campaign's events read)."
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            help="Processes projecting cells, 1 to 64 (default: one per usable core, for"
            " 2 000 cells or more). The ledger is the same bytes whatever their number.",
        ),
    ] = None,
    lineage: Annotated[
        bool,
        typer.Option(
            "--lineage",
            help="Give each cell line provenance.arenad_lineage: its cell, attempt, the"
            " attempt's first and last event seq, and the log head (seq, hash) read first,"
            " which `arenad verify-log` checks. Off: the reference's bytes.",
        ),
    ] = False,
) -> None:
    stats = run(
        services.project_ledger(_ctx.home, out, cell or [], run_id, campaign, jobs, lineage)
    )
    typer.echo(services.stats_json(stats))


@command(
    "Export the log in another tool's format (SWE-bench, Inspect, HF, OTel).",
    "arenad export swebench out/predictions --campaign demo --arm solo",
)
def export(
    format_: Annotated[
        str,
        typer.Argument(metavar="FORMAT", help="swebench, inspect, atif, hf-sft, hf-rl or otel."),
    ],
    out: Annotated[
        Path, typer.Argument(help="The directory to write (replaced whole, at the end).")
    ],
    campaign: Annotated[
        list[str] | None,
        typer.Option("--campaign", metavar="NAME", help="Only this campaign (repeatable)."),
    ] = None,
    arm: Annotated[
        list[str] | None,
        typer.Option("--arm", metavar="NAME", help="Only this arm (repeatable)."),
    ] = None,
) -> None:
    progress = _progress("cells")
    manifest = run(services.export(_ctx.home, format_, out, campaign or [], arm or [], progress))
    if progress is not None:
        sys.stderr.write("\r\033[K")
    echo_json(_json.encode(manifest))


@command(
    "Compare arms: resolve rates with 95% intervals, pass@k, cost, paired tests.",
    "arenad report --campaign demo --html report.html",
)
def report(
    campaign: Annotated[
        list[str] | None,
        typer.Option(
            "--campaign",
            metavar="NAME",
            help="Only this campaign (repeatable). Default: all, each campaign's arms apart.",
        ),
    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    html: Annotated[
        Path | None,
        typer.Option("--html", metavar="FILE", help="Also write the report as one HTML page."),
    ] = None,
    pool: Annotated[
        bool,
        typer.Option(
            "--pool",
            help="Count same-named arms of the campaigns together (refused if their specs differ).",
        ),
    ] = False,
    as_of: Annotated[
        int | None,
        typer.Option(
            "--as-of",
            metavar="EVENT",
            help="The report as the log stood after this event (its # in `arenad events`).",
        ),
    ] = None,
) -> None:
    result = run(services.report(_ctx.home, campaign or [], html, pool=pool, as_of=as_of))
    if json_:
        echo_json(services.report_json(result))
    else:
        services.print_report(result)


@command(
    "Serve a read-only web UI over the log: campaigns live, the report, cells.",
    "arenad view --port 8686",
)
def view(
    host: Annotated[
        str, typer.Option(help="Address to listen on; not loopback: --token is required.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0 = any free).")] = 8686,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="ARENAD_VIEW_TOKEN",
            help="Every request must carry it (?token= once, or Authorization: Bearer)."
            " Default: the home's own (<home>/view.token, printed in the URL served)."
            " Prefer the environment variable: an argument shows in ps.",
        ),
    ] = None,
) -> None:
    def ready(url: str) -> None:
        typer.echo(f"arenad view: serving {url} (read-only; Ctrl-C stops)", err=True)

    services.setup_logging()
    run(services.serve_view(_ctx.home, host, port, token, ready))


@command(
    "Write result.json and judge.json again from the log (atomically).",
    "arenad export-artifacts c1:inst:SUP:0",
)
def export_artifacts(
    cell: Annotated[
        list[str] | None, typer.Argument(help="The cells (default: every cell).")
    ] = None,
) -> None:
    for path in run(services.export_artifacts(_ctx.home, cell or [])):
        typer.echo(path)


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
