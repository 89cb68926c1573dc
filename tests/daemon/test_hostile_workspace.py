"""A hostile command-arm agent against the real daemon (issue 13, findings 1, 2 and 5).

The agents plant commands in their workspace's git config and attributes, delete or replace
``ws/.git``, and rewrite the object files they were given; the daemon's home lives inside a
git checkout, as it would in a user's project. Nothing they planted may run (each planted
command writes a marker), no other repository may change, and a replaced ``ws/.git`` is
recorded as tampering (not scored), never a crash. Real daemon, real git, real processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from arenad.app import init_home
from arenad.app.submit import submit_campaign
from arenad.daemon.daemon import DaemonOptions, run_daemon
from arenad.home import Home, open_store
from events import cell as ev
from events.base import Event
from tests.conftest import git, make_repo

ATTACKS = Path(__file__).resolve().parents[1] / "verdict" / "git_attacks.sh"
# finding 2: config-driven execution, in groups that do not mask each other (two diff
# drivers, or a filter process that makes `add` fail, would hide the rest on main).
CONFIG_CELLS = {
    "c1": ["fsmonitor", "hooks-path", "hooks"],
    "c7": ["include"],
    "c2": ["diff-external", "alias", "pager", "transport", "editors"],
    "c8": ["include-if"],
    # ... and a nested repository with its own fsmonitor and hooks
    "c3": ["textconv", "nested"],
    "c4": ["diff-command"],
    "c5": ["filter"],
    "c6": ["filter-process"],
}
CELLS = {
    **CONFIG_CELLS,
    # finding 1: a missing ws/.git makes git climb to the checkout around the home
    "i2": ["delete-git"],
    # finding 1: a .git file that names another repository
    "i3": ["gitdir-file"],
    # finding 5: object files rewritten in place
    "i4": ["rewrite-objects"],
    "i5": [],
}


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        if path.is_file() and not path.is_symlink():
            h.update(path.read_bytes())
    return h.hexdigest()


def _campaign(path: Path, source: Path, base: str, pwn: Path, victim: Path) -> Path:
    lines = [
        'name = "hostile"',
        'split = "dev"',
        "max_parallel = 1",
        "[materializer]",
        'kind = "git"',
        f"source = {json.dumps(str(source))}",
    ]
    for iid in CELLS:
        lines += [
            "[[instances]]",
            f'instance_id = "{iid}"',
            f'base_commit = "{base}"',
            f"problem_statement = {json.dumps(iid)}",
            # The base is intact (read through the agent's own .git, where it has one).
            "verify_cmd = "
            + json.dumps(
                "grep -q 'fixed = True' app.py && "
                f"( [ ! -d .git ] || git show {base}:app.py | grep -qx 'def f(): return 0' )"
            ),
        ]
    # One arm; the attacks are chosen by the instance id, the problem statement.
    script = (
        'case "$(cat {prompt_file})" in '
        + " ".join(f"*{iid}*) set -- {' '.join(a)} ;;" for iid, a in CELLS.items())
        + " esac; "
        + f'OUTSIDE_REPO={victim} exec bash git_attacks.sh {pwn} edit "$@"'
    )
    lines += [
        "[[arms]]",
        'name = "CMD"',
        'kind = "command"',
        f"argv = {json.dumps(['bash', '-c', script])}",
        "uses_model = false",
        "timeout_s = 60",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_a_hostile_agent_runs_nothing_of_its_own_and_reaches_no_other_repo(
    tmp_path: Path,
) -> None:
    # The home inside a checkout, whose index a climbing `git add -A` would rewrite.
    outer = tmp_path / "outer"
    make_repo(outer, {"README": "a project\n"})
    home = Home(outer / "home")
    victim = tmp_path / "victim"
    make_repo(victim, {"f": "x\n"})
    pwn = tmp_path / "pwned"
    pwn.mkdir()
    source = tmp_path / "src"
    base = make_repo(
        source,
        {"app.py": "def f(): return 0\n", "git_attacks.sh": ATTACKS.read_text()},
    )
    await init_home(home)
    await submit_campaign(home, _campaign(tmp_path / "c.toml", source, base, pwn, victim))
    before = {
        "outer index": (outer / ".git" / "index").read_bytes(),
        "victim": _digest(victim / ".git"),
        "source": _digest(source / ".git"),
    }

    assert await run_daemon(home, DaemonOptions(until_idle=True), dict(os.environ)) == 0

    # Nothing the agents planted ran, and no other repository changed.
    assert sorted(p.name for p in pwn.iterdir()) == []
    assert (outer / ".git" / "index").read_bytes() == before["outer index"]
    assert git(outer, "diff", "--cached", "--name-only") == ""
    assert _digest(victim / ".git") == before["victim"]
    assert _digest(source / ".git") == before["source"]
    assert subprocess.run(["git", "-C", str(source), "fsck"], capture_output=True).returncode == 0

    async with open_store(home) as store:
        records = [r async for r in store.read_all(0)]
    verified: dict[str, ev.CellVerified] = {}
    for iid in CELLS:
        events: list[Event] = [r.event for r in records if r.stream == f"cell/hostile:{iid}:CMD:0"]
        assert not any(isinstance(e, ev.CellFailed) for e in events), (iid, events)
        verified[iid] = next(e for e in events if isinstance(e, ev.CellVerified))
    # Config, hooks, drivers and a nested repo change only the agent's own patch: scored,
    # the fix in the patch, the nested repository named as a gap.
    for iid in CONFIG_CELLS:
        ok = verified[iid]
        assert ok.scored and ok.verify_pass and ok.tampered == [], iid
        assert ok.patch_path is not None and "+fixed = True" in Path(ok.patch_path).read_text()
        assert ok.nested_repos == (["sub"] if iid == "c3" else []), iid
    # A deleted or replaced ws/.git is tampering: recorded with its evidence, not scored;
    # the patch is still taken (it never depended on ws/.git).
    for iid in ("i2", "i3"):
        v = verified[iid]
        assert not v.scored and v.tampered, iid
        assert v.not_scored_reason is not None
        assert v.not_scored_reason.startswith("workspace tampered: ws/.git replaced"), iid
        assert v.patch_path is not None and "+fixed = True" in Path(v.patch_path).read_text()
    # Rewriting its own object files broke the agent's own repository only.
    assert verified["i4"].scored and verified["i4"].tampered == []
    assert verified["i4"].patch_path is not None
    assert "+fixed = True" in Path(verified["i4"].patch_path).read_text()
    assert verified["i5"].scored and verified["i5"].verify_pass
