"""The `arenad` command line: wiring only. Each command calls one function in
arenad.app (or a module behind it), prints the result, and turns user errors into
one line on stderr and exit status 2."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, TypeVar

import msgspec
import typer

from arenad import app as services
from arenad.errors import ArenadError, StoreError, UserError
from arenad.home import Home, resolve_home
from arenad.views import history_lines, recorded_to_json, status_table

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
    typer.echo(f"{len(applied)} migration(s) applied" + (f": {', '.join(applied)}" if applied else ""))


@command("Show per-state counts and one row per cell.", "arenad status --json")
def status(
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    campaign: Annotated[str | None, typer.Option(help="Only this campaign's cells.")] = None,
) -> None:
    result = run(services.status(_ctx.home, campaign))
    if json_:
        typer.echo(_json.encode({"counts": result["counts"], "cells": result["cells"]}).decode())
    else:
        typer.echo(status_table(result["count_list"], result["cells"]))


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
        async for r in services.events(_ctx.home, after, follow):
            if json_:
                line = recorded_to_json(r).decode()
            else:
                line = history_lines([r])[0].replace("  #", f"  {r.stream}  #", 1)
            sys.stdout.write(line + "\n")
            if follow:
                sys.stdout.flush()

    try:
        run(emit())
    except KeyboardInterrupt:
        pass


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
