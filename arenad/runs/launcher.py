"""The wrapper launcher: one warm process that forks run wrappers for the daemon.

Starting the run wrapper as a fresh interpreter costs ~8 ms of CPU per agent run (most of a
no-op cell's cost). The daemon starts this module once instead (``python -I -S -c`` with the
standard library only, like the wrapper) and asks it for each wrapper; it forks one from
its already-initialised interpreter (well under a millisecond) and the child runs
``wrapper.main`` exactly as a freshly started wrapper would: in a new session, with the
release socket as stdin, stdout and stderr on the wrapper log, the agent's environment as its
own, and no other file descriptor.

Protocol, over a ``SOCK_SEQPACKET`` Unix socket (fd 0 here; one message per packet, each a
``marshal``-ed tuple — both ends are the same interpreter):

- daemon -> launcher: ``("spawn", request_id, log_path, wrapper_args, env)`` with the release
  socket's wrapper end attached (``SCM_RIGHTS``), and optionally a second descriptor, the
  run's lifeline (``wrapper.py --lifeline``), which the wrapper gets as fd 3;
- launcher -> daemon: ``("spawned", request_id, pid, start_ticks)`` (sent once the wrapper
  leads its own session and group, so the group can be signalled at once) or
  ``("error", request_id, message)``, then ``("reaped", pid, wait_status)`` once that
  wrapper has exited and been reaped here (the daemon's cue that the run's process group may
  be empty now, and how the wrapper ended when it left no exit record).

The launcher holds nothing a run depends on: the release socket's other end stays in the
daemon, and a wrapper outlives the launcher (it is reparented, as it would be if the daemon
had been its parent and died). End-of-file on the socket means the daemon is gone: the
launcher reaps what has ended and exits.
"""

import contextlib
import marshal
import os
import select
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

# The run wrapper's entry point (``wrapper.main``): passed in by the boot line, which
# imports both modules from arenad's dir without importing the arenad package.
RunWrapper = Callable[[list[str]], int]

MAX_MESSAGE = 1 << 20
_LOG_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        return int(raw[raw.rfind(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


LIFELINE_FD = 3


def _become_wrapper(
    run_wrapper: RunWrapper,
    release_fd: int,
    ready_fd: int,
    log: str,
    args: list[str],
    env: dict[str, str],
    lifeline_fd: int | None = None,
) -> int:
    """In the forked child: shed the launcher's state, then be the run wrapper."""
    os.setsid()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if lifeline_fd is not None:
        # Out of the way of the dup2s below (a received fd may be any number from 3 up).
        lifeline_fd = os.dup(lifeline_fd)
    os.dup2(release_fd, 0)
    log_fd = os.open(log, _LOG_FLAGS, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    # This closes ``ready_fd`` too, and that end-of-file is the launcher's cue to say
    # "spawned": by then the wrapper leads its own group (the daemon may signal it) and
    # holds its three descriptors (and a cluster run's lifeline as fd 3) and nothing else
    # of the launcher's. (Closed before the dup2s, the daemon once saw the launcher's
    # descriptors 3-8 still open in a wrapper it had been told was ready.)
    if lifeline_fd is None:
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    else:
        if ready_fd == LIFELINE_FD:
            # Moved, not closed: its end-of-file must wait for the closerange below.
            ready_fd = os.dup(ready_fd)
        os.dup2(lifeline_fd, LIFELINE_FD)
        os.closerange(LIFELINE_FD + 1, os.sysconf("SC_OPEN_MAX"))
    # The agent is spawned with this environment, and PATH is searched in it.
    os.environ.clear()
    os.environ.update(env)
    try:
        return run_wrapper(args)
    except SystemExit as exc:
        if isinstance(exc.code, int):
            return exc.code
        if exc.code is not None:
            sys.stderr.write(f"{exc.code}\n")
        return 1


def _spawn(
    sock: socket.socket, run_wrapper: RunWrapper, request: tuple[Any, ...], fds: list[int]
) -> None:
    _, request_id, log, args, env = request
    if len(fds) not in (1, 2):
        for fd in fds:
            os.close(fd)
        _send(
            sock, ("error", request_id, f"expected a release fd (and a lifeline), got {len(fds)}")
        )
        return
    release_fd = fds[0]
    lifeline_fd = fds[1] if len(fds) == 2 else None
    try:
        ready_r, ready_w = os.pipe()
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        _send(sock, ("error", request_id, f"pipe: {exc}"))
        return
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in (*fds, ready_r, ready_w):
            os.close(fd)
        _send(sock, ("error", request_id, f"fork: {exc}"))
        return
    if pid == 0:
        code = 1
        try:
            os.close(ready_r)
            code = _become_wrapper(run_wrapper, release_fd, ready_w, log, args, env, lifeline_fd)
        except BaseException as exc:
            # Whatever happens, the child must never return into the launcher's loop.
            with contextlib.suppress(BaseException):
                sys.stderr.write(f"runwrap: {type(exc).__name__}: {exc}\n")
                sys.stderr.flush()
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    os.close(ready_w)
    # Until the child's setsid its pid names no process group (a daemon that signalled or
    # probed the group on "spawned" would find nothing), and until its closerange it still
    # holds the launcher's descriptors. Wait for both (end-of-file).
    os.read(ready_r, 1)
    os.close(ready_r)
    _send(sock, ("spawned", request_id, pid, _start_ticks(pid)))


def _send(sock: socket.socket, message: tuple[Any, ...]) -> None:
    # On failure the daemon is gone: the next recv reads end-of-file.
    with contextlib.suppress(OSError):
        sock.send(marshal.dumps(message))


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, ("reaped", pid, status))


def serve(sock: socket.socket, run_wrapper: RunWrapper) -> int:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_w)
    while True:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(sock)
        if sock.fileno() in ready:
            try:
                data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 4)
            except OSError:
                data, fds = b"", []
            if not data:
                _reap(sock)
                return 0
            request = marshal.loads(data)
            if request[0] == "spawn":
                _spawn(sock, run_wrapper, request, fds)
            else:
                for fd in fds:
                    os.close(fd)


def main(run_wrapper: RunWrapper) -> int:
    # posix_spawn passes on every inheritable descriptor of the daemon (a test runner's, a
    # terminal multiplexer's...): the launcher, which outlives nothing but holds them for as
    # long as the daemon runs, drops them before it forks anything.
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    return serve(socket.socket(fileno=0), run_wrapper)
