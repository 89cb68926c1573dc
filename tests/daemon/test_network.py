"""``[sandbox] network`` through the real daemon (issue 27, finding 3): a copycat agent (a
real command-arm process in real bubblewrap) reaches its scripted model and nothing else —
not ``arenad view`` of its own home, not another host listener, not an outside address —
with ``model``; nothing at all with ``none``; everything with ``host``. Its forwarder lives
in the run's wrapper, so it keeps serving across a daemon killed and restarted mid-run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from arenad import app
from arenad.home import Home
from arenad.runs import netns
from arenad.sandbox.bwrap import probe_host
from events import cell as ev
from events.base import Event
from tests.conftest import make_repo
from tests.daemon.support import (
    CLI,
    REPO_ROOT,
    cli,
    command_campaign,
    read_all,
    start_daemon,
    submitted,
    wait_for,
)
from tests.opencode_support import RunningModel

pytestmark = [
    pytest.mark.skipif(probe_host() is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(netns.problem() is not None, reason="no network namespaces here"),
]

SCRIPT = 'final_text = "Done."\n[[models]]\nid = "m"\n'
CELL = "net:i1:CMD:0"
# The copycat: asks its model for its models, then tries every neighbour it was told of and
# an outside address, and writes what each gave (an HTTP status, "connected", or the errno
# name) to net.json in its workspace. No braces: the arm's argv is a template.
PROBE = """
import errno, json, os, socket, time, urllib.error, urllib.request
def model():
    try:
        return urllib.request.urlopen(os.environ['MODEL_URL'] + '/models', timeout=30).status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return repr(e)
def connect(host, port):
    try:
        socket.create_connection((host, int(port)), timeout=30).close()
        return 'connected'
    except OSError as e:
        return errno.errorcode.get(e.errno, repr(e))
res = dict(model=model())
res.update(view=connect('127.0.0.1', os.environ['VIEW_PORT']))
res.update(other=connect('127.0.0.1', os.environ['OTHER_PORT']))
res.update(outside=connect(os.environ.get('OUTSIDE', '1.1.1.1'), 80))
if os.environ.get('WAIT'):
    open('first.json', 'w').write(json.dumps(res))
    while not os.path.exists('go'):
        time.sleep(0.02)
    res.update(after_restart=model())
open('net.json', 'w').write(json.dumps(res))
"""


@pytest.fixture
def neighbours(
    tmp_path: Path, scripted_model: Callable[[str], RunningModel]
) -> Iterator[dict[str, Any]]:
    """A scripted model, another host listener (a stand-in for Ray or another campaign's
    server) and a real ``arenad view`` of the home the cell runs in."""
    model = scripted_model(SCRIPT)
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen(64)
    home = submitted(tmp_path / "home")
    view = subprocess.Popen(
        [*CLI, "--home", str(home), "view", "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=REPO_ROOT,
        text=True,
    )
    try:
        assert view.stderr is not None
        line = view.stderr.readline()
        assert "serving http://127.0.0.1:" in line, line
        view_port = int(line.split("127.0.0.1:")[1].split("/")[0])
        yield {
            "home": home,
            "model": model,
            "other_port": other.getsockname()[1],
            "view_port": view_port,
            "view_token": line.split("?token=")[1].split()[0],
        }
    finally:
        view.send_signal(signal.SIGINT)
        try:
            view.wait(timeout=30)
        except subprocess.TimeoutExpired:
            view.kill()
            view.wait()
        other.close()


def _campaign(
    tmp_path: Path, n: dict[str, Any], network: str | None, sandbox: str = "", **env: str
) -> Path:
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    arm_env = {
        "MODEL_URL": n["model"].base_url,
        "VIEW_PORT": str(n["view_port"]),
        "OTHER_PORT": str(n["other_port"]),
        **env,
    }
    return command_campaign(
        tmp_path / "c.toml",
        name="net",
        repo=repo,
        base=base,
        argv=["python3", "-c", PROBE],
        extra=(
            ("" if network is None else f'[sandbox]\nnetwork = "{network}"\n{sandbox}')
            if network is not None or not sandbox
            else f"[sandbox]\n{sandbox}"
        )
        # The agent reaches its model itself here (through the gateway it would reach only
        # the gateway: tests/gateway/test_command_arm.py).
        + '\n[gateway]\nkind = "none"\n',
        uses_model=True,
        arm_extra="env = " + json.dumps(arm_env).replace('": "', '" = "'),
        timeout_s=120,
    )


def _submit(home: Path, campaign: Path) -> None:
    asyncio.run(app.submit_campaign(Home(home), campaign))


def _events(home: Path) -> list[Event]:
    return [r.event for r in read_all(home) if r.stream == f"cell/{CELL}"]


def _run(
    tmp_path: Path, n: dict[str, Any], network: str | None, sandbox: str = ""
) -> tuple[dict[str, Any], Any]:
    home = n["home"]
    _submit(home, _campaign(tmp_path, n, network, sandbox))
    daemon = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
    assert daemon.wait(timeout=180) == 0, (tmp_path / "daemon.err").read_text()[-3000:]
    events = _events(home)
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    result = json.loads((Path(started.cwd) / "net.json").read_text())
    return result, started


def test_model_reaches_its_model_and_no_neighbour(
    tmp_path: Path, neighbours: dict[str, Any]
) -> None:
    """The default for an arm that uses a model: its endpoint answers through the forwarder;
    the view of its own home, another host port and the internet refuse at once."""
    result, started = _run(tmp_path, neighbours, None)
    assert result["model"] == 200
    assert result["view"] == "ECONNREFUSED"
    assert result["other"] == "ECONNREFUSED"
    assert result["outside"] == "ENETUNREACH"
    port = neighbours["model"].port
    assert started.sandbox.network == "model"
    assert started.sandbox.endpoints == [f"127.0.0.1:{port} -> 127.0.0.1:{port}"]
    spec = next(e for e in _events(neighbours["home"]) if isinstance(e, ev.CellSubmitted))
    assert spec.spec.sandbox.network == "model"
    # The history and the view (with its token) say so.
    shown = f"network model [127.0.0.1:{port} -> 127.0.0.1:{port}]"
    history = cli(neighbours["home"], "history", CELL).stdout
    assert shown in next(ln for ln in history.splitlines() if " run.started " in ln)
    page = urllib.request.Request(
        f"http://127.0.0.1:{neighbours['view_port']}/cells/{quote(CELL, safe='')}",
        headers={"Authorization": f"Bearer {neighbours['view_token']}"},
    )
    with urllib.request.urlopen(page, timeout=60) as answered:
        shown_page = answered.read().decode()
    # The sandbox table of the run's collapsed details: the policy and its one endpoint.
    assert '<td class="l">network</td><td class="l">model</td>' in shown_page
    assert f"<code>127.0.0.1:{port} -&gt; 127.0.0.1:{port}</code>" in shown_page


DOCKER = 'kind = "docker"\nimage = "local/deb-py:bookworm"\n'


def _engine_or_skip() -> None:
    from arenad.containers.docker import engine_problem, image_exists

    if (problem := engine_problem()) is not None:
        pytest.skip(f"no container engine: {problem}")
    if not image_exists("local/deb-py:bookworm"):
        pytest.skip("local/deb-py:bookworm is not in the engine (scripts/build-base-image)")


def test_model_in_a_container_reaches_its_model_and_no_neighbour(
    tmp_path: Path, neighbours: dict[str, Any]
) -> None:
    """kind = "docker": the wrapper's forwarder listens inside the container's namespace."""
    _engine_or_skip()
    result, started = _run(tmp_path, neighbours, None, DOCKER)
    assert result["model"] == 200
    assert result["view"] == "ECONNREFUSED"
    assert result["other"] == "ECONNREFUSED"
    assert result["outside"] == "ENETUNREACH"
    port = neighbours["model"].port
    assert started.sandbox.kind == "docker" and started.sandbox.network == "model"
    assert started.sandbox.endpoints == [f"127.0.0.1:{port} -> 127.0.0.1:{port}"]


def test_none_in_a_container_reaches_nothing(tmp_path: Path, neighbours: dict[str, Any]) -> None:
    _engine_or_skip()
    result, started = _run(tmp_path, neighbours, "none", DOCKER)
    assert result["model"].startswith("URLError(ConnectionRefusedError")
    assert (result["view"], result["other"]) == ("ECONNREFUSED", "ECONNREFUSED")
    assert result["outside"] == "ENETUNREACH"
    assert started.sandbox.kind == "docker" and started.sandbox.network == "none"


def test_none_reaches_nothing(tmp_path: Path, neighbours: dict[str, Any]) -> None:
    result, started = _run(tmp_path, neighbours, "none")
    assert result["model"].startswith("URLError(ConnectionRefusedError")
    assert (result["view"], result["other"]) == ("ECONNREFUSED", "ECONNREFUSED")
    assert result["outside"] == "ENETUNREACH"
    assert started.sandbox.network == "none" and started.sandbox.endpoints == []


def test_host_keeps_the_machines_network(tmp_path: Path, neighbours: dict[str, Any]) -> None:
    """The explicit opt-out: today's behaviour (the view then still wants its token)."""
    result, started = _run(tmp_path, neighbours, "host")
    assert result["model"] == 200
    assert (result["view"], result["other"]) == ("connected", "connected")
    assert started.sandbox.network == "host"


def test_the_forwarder_outlives_a_killed_daemon(tmp_path: Path, neighbours: dict[str, Any]) -> None:
    """SIGKILL the daemon mid-run: the wrapper, and so the forwarder, keeps serving (the
    agent's second request, made with no daemon alive, reaches the model); the next daemon
    records the run's end."""
    home = neighbours["home"]
    _submit(home, _campaign(tmp_path, neighbours, "model", WAIT="1"))
    first = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon.err")
    try:
        started = wait_for(
            lambda: next((e for e in _events(home) if isinstance(e, ev.RunStarted)), None),
            "the run to start",
        )
        ws = Path(started.cwd)
        wait_for(lambda: (ws / "first.json").exists(), "the agent's first request", 120)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # Nothing of the daemon is left to forward: the next request goes through the wrapper.
    (ws / "go").touch()
    wait_for(lambda: (ws / "net.json").exists(), "the agent's request after the restart", 120)
    second = start_daemon(home, "--until-idle", stderr=tmp_path / "daemon2.err")
    assert second.wait(timeout=180) == 0, (tmp_path / "daemon2.err").read_text()[-3000:]
    result = json.loads((ws / "net.json").read_text())
    assert result["model"] == 200 and result["after_restart"] == 200
    # The run ended while no daemon watched: the next one read its wrapper's exit record.
    events = _events(home)
    assert [e.rc for e in events if isinstance(e, ev.RunCompleted)] == [0]


def test_a_bad_network_is_refused_naming_the_key(tmp_path: Path) -> None:
    camp = tmp_path / "c.toml"
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    command_campaign(
        camp, name="net", repo=repo, base=base, argv=["true"], extra='[sandbox]\nnetwork = "lan"'
    )
    out = subprocess.run(
        [*CLI, "--home", str(tmp_path / "home"), "submit", str(camp)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ},
        check=False,
    )
    assert out.returncode == 2
    assert "sandbox.network" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
