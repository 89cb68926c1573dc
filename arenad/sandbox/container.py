"""``[sandbox] kind = "docker"``: the agent runs in a container of the instance's image.

The run wrapper (``arenad/runs/wrapper.py``) starts ``docker run`` as its child, exactly where
a bwrap run has ``bwrap``: so the deadline, output caps, TERM→grace→KILL, the exit status and
the adoption of a run after a daemon restart hold as they do for every run (a restarted
daemon adopts the *wrapper*, which still holds the container's client; the container's name
is recorded in ``RunStarted.sandbox.container`` for the reaper and for the end of the run).

What the container sees, and nothing else of the host:

- the image's own file system (the instance's interpreter, dependencies, test runner);
- the cell's workspace read-write at ``[sandbox] workdir`` (``/testbed``), its working dir;
- the cell's run dir read-only and its private dirs (HOME, XDG, tmp, python-user) read-write
  *at their host paths*, so the cell env's HOME/XDG/opencode paths need no translation (the
  workspace is shown at its host path as well, for an argv that names it);
- the arm's shares (an opencode install, a command arm's ``read_only``) and the campaign's
  ``[sandbox] read_only``, read-only at their host paths.

Why each flag:

- ``--init``: the command is not PID 1 (a PID 1 without handlers ignores TERM, so an abort
  would always wait out its grace); docker's init forwards signals and reaps.
- No ``--rm``: the wrapper reads ``State.OOMKilled`` after the client returns (an OOM is
  recorded as ``memory``), then removes the container; the daemon (on a Ray node, the
  node's actor) removes it again by name after the run ends (a group KILL kills the client,
  not the container), and the reaper at daemon start removes any container whose attempt
  the log no longer holds as running (on Ray, from every node's engine).
- The client proxies TERM/INT/HUP to the container (``--sig-proxy``, the default without a
  tty), so the run's group signals reach the agent; a killed agent exits 128+N, as in bwrap.
- ``-e NAME`` without a value: the client copies the value from its own environment (the
  agent's, which the wrapper passes through), so no value is ever in the recorded argv.
- ``--memory`` = ``--memory-swap``, ``--pids-limit``, ``--cpus``: the cell's limits, docker's
  own (the container's processes are in docker's cgroup, not the run's).
- ``--network none`` / ``host``: the cell's network. ``model``: ``--network none`` too, and
  the command waits (a ``sh`` loop of the image's) for ``arenad.network.ready`` in the
  read-only run dir, which the wrapper writes once it listens on the model's ports *inside*
  the container's namespace (``netns.join``) and forwards them to the host, as for a bwrap
  run: docker cannot join the wrapper's own namespace, so the forwarder joins docker's. The
  agent cannot forge the file (the run dir is read-only to it) and cannot start before it.
- ``--log-driver none``: the output reaches the wrapper through the attached client only
  (capped there), not a second uncapped copy in the engine.
- ``--security-opt no-new-privileges``: a setuid binary of the image grants nothing more.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence

import msgspec


# Labels every agent container carries (the reaper selects on the home's).
def docker_bin() -> str:
    """The docker client to run: ``$ARENAD_DOCKER``, else ``docker`` on PATH. Here, not in
    :mod:`arenad.containers`: the sandbox and the wrapper's launch name the client too, and
    they sit below the engine's client code."""
    return os.environ.get("ARENAD_DOCKER") or "docker"


LABEL_HOME = "arenad.home"
LABEL_CELL = "arenad.cell"
LABEL_ATTEMPT = "arenad.attempt"
# Never passed into the container: they describe the host side of the client.
HOST_ONLY_ENV = frozenset({"PWD", "OLDPWD"})
# The wrapper's (arenad.runs.wrapper.NETWORK_READY), in the run dir.
NETWORK_READY = "arenad.network.ready"
# Waits for the forwarder, then becomes the command ($0 is the file to wait for).
READY_SHIM = 'while [ ! -e "$0" ]; do sleep 0.05; done; exec "$@"'
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")
MAX_NAME = 120


class ContainerBinds(msgspec.Struct, frozen=True, kw_only=True):
    """One agent container's view beyond its image (host paths, absolute, normalized)."""

    workspace: str
    workdir: str
    read_only: tuple[str, ...]
    run_dir: str
    read_write: tuple[str, ...]


def home_key(home_root: str) -> str:
    """A short stable key of an arenad home: two homes on one engine never share a name."""
    return hashlib.sha256(os.path.abspath(home_root).encode()).hexdigest()[:10]


def container_name(home_root: str, cell_id: str, attempt: int) -> str:
    """The agent container of one attempt of one cell (deterministic: a restarted daemon and
    the reaper find it from the log alone)."""
    cell = _NAME_UNSAFE.sub("_", cell_id)[:MAX_NAME]
    return f"arenad-{home_key(home_root)}-{cell}-a{attempt}"


def labels(home_root: str, cell_id: str, attempt: int) -> dict[str, str]:
    return {
        LABEL_HOME: os.path.abspath(home_root),
        LABEL_CELL: cell_id,
        LABEL_ATTEMPT: str(attempt),
    }


def bind_problem(path: str) -> str | None:
    """Why ``path`` cannot be a ``--mount`` source or target (its syntax is comma-separated)."""
    if "," in path or "\n" in path:
        return f"{path!r}: a path with a comma or newline cannot be mounted into a container"
    return None


def _mount(src: str, dst: str, *, read_only: bool) -> list[str]:
    spec = f"type=bind,src={src},dst={dst}"
    return ["--mount", spec + (",readonly" if read_only else "")]


def container_argv(
    docker: str,
    image: str,
    name: str,
    binds: ContainerBinds,
    command: Sequence[str],
    *,
    env_names: Sequence[str],
    network: str,
    memory_bytes: int | None,
    pids: int | None,
    cpus: float | None,
    labels: Mapping[str, str],
) -> list[str]:
    """The client's whole argv that runs ``command`` in a new container of ``image`` (pure)."""
    argv = [docker, "run", "--name", name, "--init", "-i", "--log-driver", "none"]
    argv += ["--security-opt", "no-new-privileges", f"--network={network}"]
    if memory_bytes is not None:
        argv += [f"--memory={memory_bytes}b", f"--memory-swap={memory_bytes}b"]
    if pids is not None:
        argv.append(f"--pids-limit={pids}")
    if cpus is not None:
        argv.append(f"--cpus={cpus:g}")
    for key, value in sorted(labels.items()):
        argv += ["--label", f"{key}={value}"]
    for path in binds.read_only:
        argv += _mount(path, path, read_only=True)
    argv += _mount(binds.run_dir, binds.run_dir, read_only=True)
    for path in binds.read_write:
        argv += _mount(path, path, read_only=False)
    argv += _mount(binds.workspace, binds.workdir, read_only=False)
    for key in sorted(set(env_names) - HOST_ONLY_ENV):
        argv += ["-e", key]
    argv += ["-e", f"PWD={binds.workdir}", f"--workdir={binds.workdir}"]
    # The image's own entrypoint is not ours to run: the command is the whole program.
    argv += ["--entrypoint", command[0], image, *command[1:]]
    return argv
