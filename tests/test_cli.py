"""The `arenad` command line: help texts, the README's command list, exact output of the
plain commands, user errors, and a closed pipe.

Help texts are read in-process (typer's CliRunner, cheap); everything about output and exit
status runs the real console script as a subprocess, as a user or a shell pipeline would.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import subprocess
from pathlib import Path

import aiosqlite
import pytest
import typer.core
import typer.main
from typer.testing import CliRunner

import cli
from arenad.home import Home, open_store
from arenad.store.migrations import apply_migrations, load_migrations
from tests.fullfs import fill, free, small_fs
from tests.store.helpers import REPO, add_cells, arenad_argv, count_rows, run_arenad

MIGRATION_FILES = sorted((REPO / "migrations").glob("*.sql"))


def command_group() -> typer.core.TyperGroup:
    group = typer.main.get_command(cli.app)
    assert isinstance(group, typer.core.TyperGroup)
    return group


COMMANDS = sorted(command_group().commands)


def help_text(name: str) -> str:
    # 78: what click makes of an 80-column terminal (it keeps two columns free), the
    # width the console script uses when it cannot ask the terminal.
    result = CliRunner().invoke(cli.app, [name, "--help"], terminal_width=78)
    assert result.exit_code == 0, result.output
    return result.output


def help_example(text: str) -> str:
    """The verbatim example under ``Example:`` in a command's --help."""
    lines = text.splitlines()
    start = lines.index("  Example:")
    return lines[start + 1].strip()


@pytest.mark.parametrize("name", COMMANDS)
def test_help_has_a_one_line_summary_and_an_example(name: str) -> None:
    text = help_text(name)
    paragraphs = text.split("\n\n")
    assert paragraphs[0].startswith(f"Usage: arenad {name} "), paragraphs[0]
    summary = paragraphs[1]
    assert "\n" not in summary, f"{name}: the summary wraps onto a second line: {summary!r}"
    assert summary.strip().endswith("."), summary
    assert paragraphs[2].startswith("  Example:\n    arenad "), paragraphs[2]


@pytest.mark.parametrize("name", COMMANDS)
def test_help_example_parses_as_that_command(name: str) -> None:
    """An example that names a stale option or a missing argument fails here, not in a
    user's shell: the example is parsed (not run) by the real command definitions."""
    argv = shlex.split(help_example(help_text(name)))
    assert argv[0] == "arenad"
    args = argv[1:]
    while args and args[0].startswith("--"):  # the root's own option: --home DIR
        args = args[2:] if args[0] == "--home" else args[1:]
    assert args[:1] == [name], f"the example of {name} runs another command: {argv}"
    command_group().commands[name].make_context(name, args[1:]).close()


def readme_commands() -> set[str]:
    """The command names used in README.md's "Using it" block."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Using it", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README.md's 'Using it' section has no ```bash block"
    names: set[str] = set()
    for line in block.group(1).splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0] != "arenad":
            continue
        rest = words[1:]
        while rest and rest[0].startswith("--"):
            rest = rest[2:] if rest[0] == "--home" else rest[1:]
        assert rest, f"README line names no command: {line!r}"
        names.update(rest[0].split("|"))
    return names


def test_every_command_is_documented_in_the_readme() -> None:
    documented = readme_commands()
    assert set(COMMANDS) - documented == set(), "commands missing from README 'Using it'"
    assert documented - set(COMMANDS) == set(), "README 'Using it' names commands that are gone"


# -- exact output ---------------------------------------------------------------------------


def test_init_prints_the_home_and_the_migrations_applied(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = run_arenad(home, "init")
    assert (first.returncode, first.stderr) == (0, "")
    assert (
        first.stdout == f"arenad home {home} ready ({len(MIGRATION_FILES)} migration(s) applied)\n"
    )
    again = run_arenad(home, "init")
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout == f"arenad home {home} ready (0 migration(s) applied)\n"


def test_migrate_list_on_a_fresh_home_shows_every_migration_applied(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run_arenad(home, "init").returncode == 0
    listed = run_arenad(home, "migrate", "--list")
    assert (listed.returncode, listed.stderr) == (0, "")
    assert listed.stdout == "".join(
        f"applied  {p.name}  {hashlib.sha256(p.read_bytes()).hexdigest()[:12]}\n"
        for p in MIGRATION_FILES
    )


async def test_migrate_list_shows_pending_ones_and_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    db_path = home / "arenad.db"
    async with aiosqlite.connect(db_path, isolation_level=None) as db:
        await db.execute("PRAGMA journal_mode = WAL")
        await apply_migrations(db, load_migrations()[:1])
    before = db_path.read_bytes()

    listed = run_arenad(home, "migrate", "--list")

    assert (listed.returncode, listed.stderr) == (0, "")
    states = ["applied"] + ["pending"] * (len(MIGRATION_FILES) - 1)
    assert listed.stdout == "".join(
        f"{state}  {p.name}  {hashlib.sha256(p.read_bytes()).hexdigest()[:12]}\n"
        for state, p in zip(states, MIGRATION_FILES, strict=True)
    )
    assert db_path.read_bytes() == before
    assert count_rows(db_path, "schema_migrations") == 1


def test_status_on_an_empty_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run_arenad(home, "init").returncode == 0
    plain = run_arenad(home, "status")
    assert (plain.returncode, plain.stdout, plain.stderr) == (0, "states: no cells\n", "")
    as_json = run_arenad(home, "status", "--json")
    assert (as_json.returncode, as_json.stdout, as_json.stderr) == (
        0,
        '{"counts":{},"cells":[],"campaigns":[],"overdue":[],"more":false,"by_campaign":{},'
        '"by_arm":[]}\n',
        "",
    )


async def test_verify_log_on_a_good_log(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with open_store(Home(home), create=True) as store:
        await add_cells(store, 30)
    rows = count_rows(home / "arenad.db")
    assert rows > 30
    done = run_arenad(home, "verify-log")
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"log ok: {rows} events, chain verified\n",
        "",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("status",), "arenad: no arenad store at {db}; run `arenad --home {home} init`"),
        (("history", "demo:nope:SOLO:0"), "arenad: no cell 'demo:nope:SOLO:0' in {db}"),
        (("submit", "{home}/missing.toml"), "arenad: "),
    ],
    ids=["uninitialized-home", "unknown-cell", "missing-campaign-file"],
)
def test_a_user_error_is_one_line_on_stderr_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    home = tmp_path / "home"
    if args[0] != "status":
        assert run_arenad(home, "init").returncode == 0
    done = run_arenad(home, *(a.format(home=home) for a in args))
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and done.stderr.endswith("\n"), done.stderr
    assert lines[0].startswith(message.format(home=home, db=home / "arenad.db")), lines[0]


# -- exit codes: 0 ok, 1 runtime failure, 2 user error, 86 injected crash -----------------


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_an_unknown_fault_tag_is_a_user_error_and_writes_nothing(tmp_path: Path) -> None:
    # Issue 14, finding 10: a tag no event has was accepted, and the fault never fired.
    home = tmp_path / "home"
    assert run_arenad(home, "init").returncode == 0
    done = run_arenad(
        home, "daemon", "--until-idle", env={"ARENAD_FAULT": "crash-after:run.startd"}
    )
    assert done.returncode == 2
    line = _one_line(done)
    assert "ARENAD_FAULT" in line and "'run.startd'" in line, line
    assert count_rows(home / "arenad.db") == 0


def test_a_store_full_at_start_is_a_runtime_failure_not_a_user_error(tmp_path: Path) -> None:
    # Issue 14, finding 10: a store full at start exited 2 (the user-error code), while one
    # that fills during a run exits 1. On a real full filesystem both are runtime failures.
    with small_fs(tmp_path / "fs") as fs:
        home = fs / "home"
        assert run_arenad(home, "init").returncode == 0
        fill(fs)
        try:
            done = run_arenad(home, "daemon", "--until-idle")
            retried = run_arenad(home, "set-max-parallel", "3")
        finally:
            free(fs)
    assert done.returncode == 1, done.stderr
    assert "cannot be written" in _one_line(done) or "event store" in _one_line(done)
    assert retried.returncode == 1, retried.stderr
    _one_line(retried)


def test_a_home_the_machine_refuses_is_one_line_and_exit_1(tmp_path: Path) -> None:
    # An OSError (here: no directory can be made under /proc) was a traceback.
    done = run_arenad(Path("/proc/arenad-test-home"), "init")
    assert done.returncode == 1
    assert _one_line(done).startswith("arenad: /proc/arenad-test-home: ")


# -- a closed pipe (`arenad events --json | head -1`) ---------------------------------------


@pytest.mark.parametrize("follow", [False, True], ids=["read", "follow"])
async def test_events_stops_quietly_when_the_reader_closes_the_pipe(
    tmp_path: Path, follow: bool
) -> None:
    home = tmp_path / "home"
    async with open_store(Home(home), create=True) as store:
        # Far more output than the pipe's buffer and stdout's together hold, so the
        # process is still writing when the reader goes away.
        await add_cells(store, 1000)
    argv = [*arenad_argv(), "--home", str(home), "events", "--json"]
    if follow:
        argv.append("--follow")
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=REPO
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    try:
        returncode = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("arenad events kept running after its reader closed the pipe")
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert first.startswith(b'{"seq":1,')
    assert stderr == ""
    # typer's (click's) rule for a broken pipe: stop, print nothing, exit 1.
    assert returncode == 1
