"""What one cell's child may see, decided where the cell lives: its agent run, its verify
command and its judge (the command line itself is :mod:`arenad.sandbox.bwrap`'s).

Shown read-only besides the system:

- the campaign's ``[sandbox] read_only`` paths;
- what the arm names: the opencode install of an opencode arm, the supervisor's loops
  checkout;
- the tool chains on the child's PATH that live outside the system: a virtualenv's ``bin``
  brings the venv and its base interpreter (a venv's ``python`` is a symlink into it), a
  ``node_modules/.bin`` its ``node_modules``;
- for every shown virtualenv, its base interpreter.

Shown read-write: the workspace and the cell's private dirs (home, xdg, tmp, python-user),
on top of the run dir, which is read-only (the run wrapper's exit record and the output
files are evidence the agent must not rewrite). Hidden: everything else, in particular the
arenad home around the run dir (other cells, templates, ``arenad.db``), the user's home and
the secrets dir. A path that would show one of those is never shown: refused at submit
(:func:`share_problem`) and again here.

Before a paid run starts, the agent's executable (and a script's interpreter) must be
visible inside: otherwise the run fails at launch naming the key that shares it, instead of
dying with exit 127 like an agent's own failure.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

import msgspec

from arenad.errors import ArenadError
from arenad.sandbox import container
from arenad.sandbox.bwrap import (
    Binds,
    Host,
    inside,
    nested_dropped,
    probe_host,
    probe_works,
    sandbox_argv,
)
from arenad.sandbox.cellenv import cell_paths
from arenad.sandbox.container import docker_bin
from events.cell import SandboxView
from events.specs import SandboxSpec

# Never shown as a whole: the root, the scratch and kernel dirs (inside they are fresh).
UNSHAREABLE = ("/", "/tmp", "/var", "/var/tmp", "/proc", "/sys", "/dev", "/run")
SHARE_KEY = "[sandbox] read_only"
INSTALL_HINT = "install bubblewrap (apt-get install bubblewrap; scripts/setup does)"


class SandboxError(ArenadError):
    """The cell's sandbox cannot be made as asked; the message says why and what to change."""


class CellSandbox(msgspec.Struct, frozen=True, kw_only=True):
    """What the site needs to confine a cell's child (plain data: it crosses the seam)."""

    spec: SandboxSpec
    run_dir: str
    workspace: str
    # The arenad home the run dir lives in (hidden, and never shareable).
    home_root: str
    secrets_dir: str | None = None
    # kind = "docker" (arenad.sandbox.container): the agent's image and its container's
    # name and labels for this attempt.
    image: str | None = None
    container: str | None = None
    labels: dict[str, str] = {}


class Confined(msgspec.Struct, frozen=True, kw_only=True):
    """A command as it is to be started, and the view it gets (for ``RunStarted``)."""

    argv: list[str]
    view: SandboxView
    sandboxed: bool


def user_homes() -> list[str]:
    """The user's home as the OS and as this process's HOME name it."""
    homes = []
    with contextlib.suppress(KeyError):
        homes.append(pwd.getpwuid(os.getuid()).pw_dir)
    if os.environ.get("HOME"):
        homes.append(os.environ["HOME"])
    return sorted({os.path.normpath(h) for h in homes if os.path.isabs(h)})


def share_problem(
    path: str, *, home_root: str | None, secrets_dir: str | None, homes: Sequence[str]
) -> str | None:
    """Why ``path`` (absolute) must not be shown to a cell; None when it may be."""
    p = os.path.normpath(path)
    if p in UNSHAREABLE:
        return f"{p} is a system root (inside, it is fresh or hidden)"
    if home_root is not None:
        home = os.path.normpath(home_root)
        if inside(home, p):
            return f"{p} contains the arenad home {home} (every cell, the store)"
        if inside(p, home):
            return f"{p} is inside the arenad home {home} (other cells, templates, the store)"
    if secrets_dir is not None:
        secrets = os.path.normpath(secrets_dir)
        if inside(secrets, p) or inside(p, secrets):
            return f"{p} overlaps the secrets dir {secrets} (a child gets variables, not files)"
    for home in homes:
        if inside(home, p):
            return f"{p} contains the user's home {home}"
    return None


def venv_base(root: str) -> str | None:
    """The base interpreter prefix of the virtualenv at ``root`` (None: not a venv)."""
    try:
        with open(os.path.join(root, "pyvenv.cfg"), encoding="utf-8", errors="replace") as f:
            lines = f.read(64 * 1024).splitlines()
    except OSError:
        return None
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home" and os.path.isabs(value.strip()):
            home = os.path.realpath(value.strip())
            return os.path.dirname(home) if os.path.basename(home) == "bin" else home
    return None


def npm_prefix(path: str) -> str | None:
    """The ``node_modules`` dir an npm-installed executable lives in (None: not npm's)."""
    parts = path.split("/")
    if "node_modules" not in parts:
        return None
    return "/".join(parts[: parts.index("node_modules") + 1]) or None


def with_companions(paths: Iterable[str]) -> list[str]:
    """``paths`` plus what each needs to work: a venv's base interpreter."""
    out = []
    for p in paths:
        out.append(p)
        base = venv_base(p)
        if base is not None:
            out.append(base)
    return out


def path_toolchains(search_path: str) -> list[str]:
    """Tool chains on a PATH that are not the system's: venvs and npm trees."""
    found = []
    for entry in search_path.split(os.pathsep):
        if not os.path.isabs(entry):
            continue
        entry = os.path.normpath(entry)
        parent = os.path.dirname(entry)
        if os.path.basename(entry) == "bin" and os.path.isfile(os.path.join(parent, "pyvenv.cfg")):
            found.append(parent)
        elif (prefix := npm_prefix(entry)) is not None:
            found.append(prefix)
    return found


def _which(name: str, search_path: str, cwd: str) -> str | None:
    if "/" in name:
        path = os.path.normpath(os.path.join(cwd, name))
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(name, path=search_path)


def install_roots(executable: str, search_path: str, cwd: str) -> list[str]:
    """What to show so that a known agent CLI (opencode) runs: its npm tree, else its dir,
    for both the path it is called by and the file it resolves to."""
    found = _which(executable, search_path, cwd)
    if found is None:
        return []
    roots = []
    for path in (os.path.abspath(found), os.path.realpath(found)):
        roots.append(npm_prefix(path) or os.path.dirname(path))
    return with_companions(roots)


def _interpreter(path: str) -> list[str]:
    """A script's ``#!`` line as argv (empty: not a script)."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    return head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()


def check_visible(
    executable: str,
    *,
    search_path: str,
    cwd: str,
    visible: Callable[[str], bool],
    what: str | None = None,
    depth: int = 0,
) -> None:
    """Raise SandboxError unless ``executable`` (a path, or a name looked up on the
    directories of ``search_path`` that are visible) and a script's interpreter are
    visible inside the sandbox."""
    if "/" in executable:
        candidates = [os.path.normpath(os.path.join(cwd, executable))]
    else:
        candidates = [
            os.path.join(d, executable) for d in search_path.split(os.pathsep) if os.path.isabs(d)
        ]
    what = what or f"the agent's executable {executable!r}"
    hidden: str | None = None
    for path in candidates:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            continue
        real = os.path.realpath(path)
        if not (visible(path) and visible(real)):
            hidden = hidden or path
            continue
        interpreter = _interpreter(real)
        if interpreter and depth < 2:
            names = [interpreter[0]]
            if os.path.basename(interpreter[0]) == "env" and len(interpreter) > 1:
                names.append(interpreter[-1])
            for name in names:
                check_visible(
                    name,
                    search_path=search_path,
                    cwd=cwd,
                    visible=visible,
                    what=f"{name!r}, the interpreter of {executable!r},",
                    depth=depth + 1,
                )
        return
    if hidden is not None:
        real = os.path.realpath(hidden)
        where = hidden if real == hidden else f"{hidden} -> {real}"
        raise SandboxError(
            f"{what} ({where}) is not visible inside the sandbox: share its"
            f' directory with {SHARE_KEY} = ["{os.path.dirname(real)}"] in the campaign'
            ' (or opt out with [sandbox] kind = "none")'
        )
    raise SandboxError(
        f"{what} was not found"
        + ("" if "/" in executable else " on the cell's PATH")
        + " (a sandboxed run would exit 127)"
    )


NO_BWRAP = (
    '[sandbox] kind = "bwrap" (the default) but bubblewrap (bwrap) is not installed or does'
    f' not run on this machine: {INSTALL_HINT}, or opt out with [sandbox] kind = "none"'
)


def _host() -> Host:
    host = probe_host()
    if host is None:
        raise SandboxError(NO_BWRAP)
    return host


def host_problem() -> str | None:
    """Why no cell can be sandboxed on this machine (None: bwrap makes sandboxes here)."""
    host = probe_host()
    if host is None:
        return NO_BWRAP
    problem = probe_works(host)
    return None if problem is None else f'[sandbox] kind = "bwrap": {problem}'


def _shares(cell: CellSandbox, read_only: Sequence[str]) -> list[str]:
    """The campaign's and the arm's read-only shares, real paths, each refused when it would
    show something hidden (the arenad home, the secrets dir, the user's home)."""
    homes = user_homes()
    given = []
    asked = [(SHARE_KEY, p) for p in cell.spec.read_only]
    asked += [("what the arm shares (its agent's install, its checkout)", p) for p in read_only]
    for key, raw in asked:
        if not os.path.exists(raw):
            raise SandboxError(f"{key}: {raw} does not exist on this machine")
        real = os.path.realpath(raw)
        for path in {os.path.normpath(raw), real}:
            problem = share_problem(
                path, home_root=cell.home_root, secrets_dir=cell.secrets_dir, homes=homes
            )
            if problem is not None:
                raise SandboxError(f"{key}: {problem}")
        given.append(real)
    return given


def _in_container(
    cell: CellSandbox,
    command: Sequence[str],
    env: Mapping[str, str],
    read_only: Sequence[str],
    read_write: Sequence[str],
    container_network: str,
) -> Confined:
    """An agent run in its container (:mod:`arenad.sandbox.container`)."""
    if cell.image is None or cell.container is None:
        raise SandboxError('[sandbox] kind = "docker": the cell has no image to run the agent in')
    if container_network not in ("none", "host", "model"):
        raise SandboxError(f"[sandbox] network = {container_network!r} is not a network")
    shares = nested_dropped(with_companions(_shares(cell, read_only)))
    run_dir = os.path.normpath(cell.run_dir)
    paths = cell_paths(run_dir)
    private = [cell.workspace, paths.home, paths.xdg_root, paths.tmp, paths.python_user_base]
    writable = [p for p in [*private, *read_write] if os.path.exists(p)]
    for p in writable:
        if not inside(os.path.normpath(p), run_dir):
            raise SandboxError(f"a read-write path must be inside the run dir: {p}")
    binds = container.ContainerBinds(
        workspace=os.path.normpath(cell.workspace),
        workdir=cell.spec.workdir,
        read_only=shares,
        run_dir=run_dir,
        read_write=nested_dropped(writable),
    )
    for path in (*binds.read_only, binds.run_dir, *binds.read_write, binds.workdir):
        if (problem := container.bind_problem(path)) is not None:
            raise SandboxError(f'[sandbox] kind = "docker": {problem}')
    if container_network == "model":
        # The forwarder is made once the container runs; the command waits for it.
        ready = os.path.join(run_dir, container.NETWORK_READY)
        command = ["/bin/sh", "-c", container.READY_SHIM, ready, *command]
    argv = container.container_argv(
        docker_bin(),
        cell.image,
        cell.container,
        binds,
        command,
        env_names=list(env),
        network="none" if container_network == "model" else container_network,
        memory_bytes=cell.spec.memory_bytes,
        pids=cell.spec.pids,
        cpus=cell.spec.cpus,
        labels=cell.labels,
    )
    view = SandboxView(
        kind="docker",
        read_only=[*binds.read_only, binds.run_dir],
        read_write=[*binds.read_write, f"{binds.workspace} -> {binds.workdir}"],
        network=container_network,
        container=cell.container,
        image=cell.image,
    )
    return Confined(argv=argv, view=view, sandboxed=True)


def confine(
    cell: CellSandbox,
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    chdir: str,
    read_only: Sequence[str] = (),
    read_write: Sequence[str] = (),
    executables: Sequence[str] = (),
    network: Literal["none", "inherit"] = "inherit",
    container_network: str = "none",
) -> Confined:
    """``command`` confined to the cell's view (or as it is, with ``kind = "none"``).

    ``read_only``: the arm's own shares (refused like the campaign's when they would show
    something hidden); ``read_write``: paths under the run dir the child writes besides the
    workspace and the private dirs; ``executables``: what must be visible inside for the
    command to start (checked here, before anything runs); ``network`` "none": the sandbox
    gets its own network namespace, loopback only (a verify, a judge).

    With ``kind = "docker"`` an agent run (``network`` "inherit") runs in its container
    with ``container_network`` ("none" or "host"); a verify or judge (``network`` "none")
    is confined as with bwrap.
    """
    if cell.spec.kind == "none":
        return Confined(argv=list(command), view=SandboxView(kind="none"), sandboxed=False)
    if cell.spec.kind == "docker" and network == "inherit":
        return _in_container(cell, command, env, read_only, read_write, container_network)
    host = _host()
    homes = user_homes()

    def refused(path: str) -> str | None:
        return share_problem(
            path, home_root=cell.home_root, secrets_dir=cell.secrets_dir, homes=homes
        )

    given = []
    asked = [(SHARE_KEY, p) for p in cell.spec.read_only]
    asked += [("what the arm shares (its agent's install, its checkout)", p) for p in read_only]
    for key, raw in asked:
        if not os.path.exists(raw):
            raise SandboxError(f"{key}: {raw} does not exist on this machine")
        real = os.path.realpath(raw)
        for path in {os.path.normpath(raw), real}:
            problem = refused(path)
            if problem is not None:
                raise SandboxError(f"{key}: {problem}")
        given.append(real)
    search_path = env.get("PATH", os.defpath)
    found = [p for p in with_companions(path_toolchains(search_path)) if os.path.isdir(p)]
    shares = [*with_companions(given), *(p for p in found if refused(p) is None)]
    shares = [p for p in shares if refused(p) is None]
    read_only_dirs = nested_dropped(shares, covered=host.system_roots)

    run_dir = os.path.normpath(cell.run_dir)
    paths = cell_paths(run_dir)
    private = [cell.workspace, paths.home, paths.xdg_root, paths.tmp, paths.python_user_base]
    writable = [p for p in [*private, *read_write] if os.path.exists(p)]
    for p in writable:
        if not inside(os.path.normpath(p), run_dir):
            raise SandboxError(f"a read-write path must be inside the run dir: {p}")
    binds = Binds(
        read_only=read_only_dirs,
        run_dir=run_dir,
        read_write=nested_dropped(writable),
        chdir=chdir,
    )
    roots = (*host.system_roots, *binds.read_only, binds.run_dir)
    for exe in executables:
        check_visible(
            exe,
            search_path=search_path,
            cwd=chdir,
            visible=lambda p: any(inside(p, r) for r in roots),
        )
    view = SandboxView(
        kind="bwrap",
        version=host.version,
        read_only=[*host.system_roots, *binds.read_only, binds.run_dir],
        read_write=list(binds.read_write),
    )
    if network == "none":
        view = msgspec.structs.replace(view, network="none")
    argv = sandbox_argv(host, binds, command, unshare_net=network == "none")
    return Confined(argv=argv, view=view, sandboxed=True)
