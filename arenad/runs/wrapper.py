"""The run wrapper: the process between the daemon and an agent, so the agent can outlive it.

The daemon's launcher (``arenad/launcher.py``: a warm ``python -I -S`` interpreter with
the standard library only) forks a process that calls :func:`main` in a new session, as if
this module had been started afresh with the agent's environment; the wrapper is the
process-group leader and the agent becomes its child in the same group, so one ``killpg``
reaches both. Four jobs:

1. **Start the agent only if the log says it started.** The wrapper's stdin is one end
   of a socket pair only the daemon holds the other end of. The daemon writes this
   wrapper's pid into it right after ``RunStarted`` (naming that pid) is committed. If
   the daemon dies first, the socket reads end-of-file and the wrapper asks the log
   itself: with a committed ``RunStarted`` for this pid and attempt it starts the agent
   (the restarted daemon adopts the run); without one it exits having started nothing.
   So an agent runs if and only if the log records its start: never twice, never
   unrecorded. (The daemon never closes its end unreleased while the wrapper lives: it
   kills the wrapper first.)
2. **Outlive group signals.** SIGTERM, SIGINT and SIGHUP only set a flag here (the agent
   gets them with default handling), so the wrapper survives a timeout or abort long enough
   to record how the agent ended. SIGKILL ends both. A signal before the release means the
   agent never starts.
3. **Record the exit.** When the agent ends, the wrapper writes the exit record
   (``exit.json``, atomically: temp file, fsync, rename) that a restarted daemon reads.
   The record's keys are ``wrapper_pid``, ``started`` (bool), ``pid`` (the agent's),
   ``exit_status`` / ``term_signal`` (one of them set), ``ended_at_ms``, ``error`` when
   the agent could not be started, and ``capped`` / ``kept`` (per output file cut: the
   cause, and the bytes the file kept) when output was dropped.
   **A record that cannot be written** (disk full) is not lost: the wrapper sends it, as
   one JSON line with ``exit_file_error`` added, back through its stdin (the daemon's end
   of a socket pair) and keeps it, trying the file again every second until it can write
   it; the daemon that reads it ends the wrapper with SIGTERM (it has the record). With no
   daemon there (the socket's other end is gone), the next daemon adopts a live wrapper
   and reads the file once the disk has room.
4. **Cap the agent's output.** The agent's stdout and stderr are pipes that the wrapper
   copies into their files, up to ``--cap`` bytes each (no cap if negative, the default).
   Past the cap the output is still read, so the agent never blocks, but dropped; the
   first dropped byte creates ``<file>.capped`` so the daemon records the cut. A file that
   cannot be written (disk full) is treated the same way, with the error as the cause.

Arguments (all required but ``--stdin``, ``--cap`` and the remote options below)::

    runwrap --exit-file F --store DB --stream S --attempt N --cwd DIR [--stdin FILE]
            --stdout FILE --stderr FILE [--cap BYTES]
            [--network none|model [--forward PORT=TARGET,...]] -- ARGV...

``--network``: the agent runs in its own network namespace (``arenad/runs/netns.py``, made
after the release, before the agent starts): loopback only, and with ``model`` the
``--forward`` endpoints listened on inside and copied to their targets on the host by a
thread of this wrapper (so the forwarder lives exactly as long as the run). A namespace that
cannot be made is recorded like an agent that could not be started.

On a cluster node (the Ray executor) the supervisor is an actor on the node, and the log is
on another machine, so four more rules apply (all off unless given):

- ``--store`` is left out: end-of-file on the release pipe before the release means the
  agent never starts (the node cannot ask the log).
- ``--lifeline FD``: the read end of a pipe whose only write end the actor holds. End of
  file means the actor is gone, however it died (killed, its node removed); the wrapper
  then records ``ended_by: lifeline ...`` and SIGKILLs its whole group, itself included:
  an agent never outlives the actor that would report it.
- ``--lifeline-silence S``: the actor also writes a byte at least every S seconds while its
  node and the head are in touch; S seconds without one (a frozen node, a partition) is
  treated like end-of-file.
- ``--deadline-s D`` (with ``--grace G``): the wrapper enforces the run's deadline itself,
  D seconds after it started (the actor, which normally does it, may be frozen): TERM to
  the group, G seconds, then the record (``ended_by: deadline``) and KILL.

``--container NAME --docker BIN`` (``[sandbox] kind = "docker"``, ``arenad/sandbox/container.py``):
the agent is ``docker run --name NAME ...``, the container's client. The client proxies the
group's TERM/INT/HUP to the container; when a limit ends the run the wrapper also ``docker
kill``s NAME (killing the client does not stop its container), and when its lifeline or its
own deadline does it removes NAME (``docker rm -f``) before the group's KILL. After the
client returns the wrapper reads ``State.OOMKilled`` (true: the record's ``limit`` is
"memory") and removes the container (``docker rm -f``).
``--container-forward PORT=TARGET,...`` (``network = "model"``): the container has
``--network none`` and its command waits for ``arenad.network.ready`` in the run dir; once
the container runs, the wrapper listens on each port inside the container's namespace
(``netns.join``), forwards from there as for ``--network model``, and only then writes the
ready file. A network that cannot be made kills the container: its agent never started.

Limits (all off unless given; ``arenad/runs/cgroups.py`` makes the group and the
daemon's argv joins it before exec):

- ``--cgroups DIR:DIR...``: the run's cgroup directories (one per v1 controller, one on
  v2). Every ``LIMIT_CHECK_S`` (0.5 s) the wrapper reads the kernel's counters there: an OOM kill
  (``memory.oom_control`` / ``memory.events`` ``oom_kill``) or a refused fork
  (``pids.events`` ``max``) ends the whole group (v1 has no ``memory.oom.group``: the
  wrapper SIGKILLs every pid in ``cgroup.procs`` until none is left), and the exit record
  says ``limit``: "memory" or "pids".
- ``--disk-dir DIR --disk-max BYTES``: DIR's disk use (allocated blocks, no symlink
  followed, hard links once, at most ``DISK_WALK_ENTRIES`` entries a walk) is measured by
  a walk, and past BYTES the run is ended the same way with ``limit`` "disk". A walk costs
  (tens of ms for a large repository, for each of hundreds of runs), so between walks one
  ``statvfs`` a check bounds DIR's growth: DIR cannot have grown more than the whole
  filesystem's use since the last walk (unless something else freed space meanwhile:
  hence a walk at least every ``DISK_RECHECK_S`` all the same). DIR is walked again once
  that bound could pass BYTES, at most every ``DISK_CHECK_S`` and never more often than
  ten times a walk's own duration.

Imports are builtins only on the common path (``_signal``, not ``signal``, whose enums
cost more than the rest of the start-up); the wrapper runs once per agent run.

The environment the wrapper gets is the agent's environment, passed through untouched.
"""

import _signal  # type: ignore[import-not-found]  # no stubs: the C half of `signal`
import os
import sys
import time

# Tags and fields of the log this wrapper reads (events.cell.RunStarted); kept literal so the
# wrapper imports nothing but the standard library.
RUN_STARTED_TAG = "run.started"
NOT_STARTED_EXIT = 3
# Made next to an output file once the cap has cut it (arenad.runs.detached reads it).
CAPPED_SUFFIX = ".capped"
# How long output is still copied after the agent exited while a leftover holds its pipes.
LEFTOVER_DRAIN_S = 1.0
# How often an exit record that could not be written (disk full) is tried again.
EXIT_RETRY_S = 1.0
# How often the run's cgroup counters are read, and the workspace's disk use measured at
# most (see the module docstring, "Limits").
LIMIT_CHECK_S = 0.5
DISK_CHECK_S = 1.0
DISK_RECHECK_S = 60.0
DISK_WALK_ENTRIES = 200_000
# In the run dir: the container's command starts once this exists (arenad.sandbox.container).
NETWORK_READY = "arenad.network.ready"
# How long a container may take to be running (an image's first start can be slow).
CONTAINER_START_S = 120.0
_terminate = False


def _on_signal(signum: int, frame: object) -> None:
    global _terminate
    _terminate = True


def _say(message: str) -> None:
    """A line in the wrapper's log, if it can be written (not on a full disk: that must
    not stop the wrapper from doing its jobs)."""
    try:  # noqa: SIM105  (contextlib is not imported on the wrapper's common path)
        os.write(2, f"runwrap: {message}\n".encode(errors="replace"))
    except OSError:
        pass


def _parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    if "--" not in argv:
        raise SystemExit("runwrap: missing -- before the agent's argv")
    split = argv.index("--")
    opts, command = argv[:split], argv[split + 1 :]
    if len(opts) % 2 or not command:
        raise SystemExit("runwrap: options come in pairs and an argv must follow --")
    parsed = {opts[i].lstrip("-"): opts[i + 1] for i in range(0, len(opts), 2)}
    required = ("exit-file", "stream", "attempt", "cwd", "stdout")
    missing = [name for name in (*required, "stderr") if name not in parsed]
    if missing:
        raise SystemExit(f"runwrap: missing options {missing}")
    if not parsed.get("cap", "-1").lstrip("-").isdigit():
        raise SystemExit(f"runwrap: --cap must be a whole number, not {parsed['cap']!r}")
    for name in ("lifeline-silence", "deadline-s", "grace"):
        try:
            float(parsed.get(name, "0"))
        except ValueError:
            raise SystemExit(f"runwrap: --{name} must be a number of seconds") from None
    if not parsed.get("disk-max", "0").isdigit():
        raise SystemExit(
            f"runwrap: --disk-max must be a whole number of bytes, not {parsed['disk-max']!r}"
        )
    if not parsed.get("lifeline", "0").isdigit():
        raise SystemExit(
            f"runwrap: --lifeline must be a file descriptor, not {parsed['lifeline']!r}"
        )
    return parsed, command


def _json(record: dict[str, object]) -> str:
    # Hand-made on the common path: importing json (and re with it) would double the
    # wrapper's start-up time, paid once per agent run. Values are ints, bools, None.
    if not all(v is None or isinstance(v, int) for v in record.values()):
        import json

        return json.dumps(record, sort_keys=True)
    items = ", ".join(f'"{k}": {_scalar(v)}' for k, v in sorted(record.items()))
    return "{" + items + "}"


def _scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    assert isinstance(value, int)
    return str(value)


def _write_exit_record(path: str, record: dict[str, object]) -> None:
    tmp = f"{path}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            data = (_json(record) + "\n").encode()
            if os.write(fd, data) != len(data):
                raise OSError(28, os.strerror(28))  # a short write: only a full disk does it
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        try:  # noqa: SIM105  (no contextlib here: see _say)
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _finish(path: str, record: dict[str, object]) -> None:
    """Write the exit record; if it cannot be written, hand it to the daemon and keep
    trying (see the module docstring, job 3)."""
    try:
        _write_exit_record(path, record)
        return
    except OSError as exc:
        error = exc.strerror or str(exc)
    _say(f"cannot write {path}: {error}; sent to the daemon, kept")
    try:  # noqa: SIM105  (no contextlib here: see _say)
        # Into the socket pair that released us, to the daemon's end (a socket whose
        # daemon is gone refuses, as does a pipe: then the file is all there is).
        os.write(0, (_json({**record, "exit_file_error": error}) + "\n").encode())
    except OSError:
        pass
    import select

    while not _terminate:
        select.select([], [], [], EXIT_RETRY_S)
        try:
            _write_exit_record(path, record)
            return
        except OSError:
            continue
    # Ended by a signal (the daemon has the record, or whoever sent it wants us gone):
    # one last try.
    try:
        _write_exit_record(path, record)
    except OSError:
        _say(f"{path} never written ({error})")


def _start_recorded(store: str, stream: str, attempt: int) -> bool:
    """Whether the log holds a RunStarted for this wrapper's pid and attempt."""
    # Only on this rare path (the daemon died before releasing us): imported here.
    import contextlib
    import json
    import sqlite3

    # Not mode=ro: a WAL database whose last connection closed has no -shm file, and a
    # read-only connection cannot create it. This connection only reads.
    try:
        with contextlib.closing(
            sqlite3.connect(f"file:{store}?mode=rw", uri=True, timeout=30)
        ) as db:
            rows = db.execute(
                "SELECT payload FROM events WHERE stream = ? AND tag = ?",
                (stream, RUN_STARTED_TAG),
            ).fetchall()
    except sqlite3.Error as exc:
        # Unknowable: starting could run the agent twice, not starting loses nothing
        # that was paid for (the next daemon sees a run that never began).
        _say(f"cannot read the log at {store}: {exc}")
        return False
    me = os.getpid()
    for (payload,) in rows:
        started = json.loads(payload)
        if started.get("pid") == me and started.get("attempt") == attempt:
            return True
    return False


class _Lifeline:
    """The read end of a pipe whose only write end the run's supervisor holds (a Ray
    actor): end-of-file means the supervisor is gone; with ``silence_s`` it must also write
    a byte at least that often."""

    def __init__(self, fd: int, silence_s: float) -> None:
        self.fd = fd
        self.silence_s = silence_s
        self.last = time.monotonic()
        self.why = ""
        # Never passed on: an agent holding it could drain the beats.
        os.set_inheritable(fd, False)
        os.set_blocking(fd, False)

    def wait_s(self, now: float) -> float | None:
        return None if self.silence_s <= 0 else max(0.0, self.last + self.silence_s - now)

    def gone(self, readable: bool, now: float) -> bool:
        """Whether the supervisor is gone (``why`` then says how)."""
        if readable:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                data = b"."
            if not data:
                self.why = "lifeline closed: the run's supervisor is gone"
                return True
            self.last = now
        if self.silence_s > 0 and now - self.last >= self.silence_s:
            self.why = f"lifeline silent for {self.silence_s:g} s"
            return True
        return False


def _wait_for_release(opts: dict[str, str], lifeline: _Lifeline | None) -> bool:
    """True once the agent may start; False if it must never start."""
    import select  # a builtin-sized extension module, for a wait that notices signals

    me = str(os.getpid()).encode()
    got = b""
    watched = [0] if lifeline is None else [0, lifeline.fd]
    while True:
        if _terminate:
            return False
        ready, _, _ = select.select(watched, [], [], 0.1)
        if lifeline is not None and lifeline.gone(lifeline.fd in ready, time.monotonic()):
            return False
        if 0 not in ready:
            continue
        chunk = os.read(0, 64)
        if not chunk:
            # Only the daemon held the write end: it is gone, so what the log says now
            # is final. Without a log on this machine nothing can say the start was
            # recorded, so the agent does not start.
            if "store" not in opts:
                return False
            return _start_recorded(opts["store"], opts["stream"], int(opts["attempt"]))
        got += chunk
        if got.endswith(b"\n"):
            return got.strip() == me


def _end_group(exit_file: str, record: dict[str, object]) -> None:
    """Record how the run ended, then SIGKILL the whole group (this wrapper included)."""
    ended_at_ms = time.time_ns() // 1_000_000
    try:
        _write_exit_record(
            exit_file, {"wrapper_pid": os.getpid(), **record, "ended_at_ms": ended_at_ms}
        )
    except OSError as exc:
        # The group must end all the same: nobody is left to report it.
        _say(f"cannot write {exit_file}: {exc.strerror or exc}")
    os.killpg(0, _signal.SIGKILL)


def _counter(path: str, key: str) -> int:
    """One ``key value`` line of a cgroup file (0: no such file or line)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return 0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _fs_used(path: str) -> int:
    """Bytes in use on the filesystem holding ``path`` (0: unknown)."""
    try:
        vfs = os.statvfs(path)
    except OSError:
        return 0
    return (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize


def disk_use(root: str, max_entries: int = DISK_WALK_ENTRIES) -> int:
    """Bytes allocated under ``root`` (a lower bound once ``max_entries`` are seen)."""
    total = 0
    seen = 0
    inodes: set[tuple[int, int]] = set()
    stack = [root]
    while stack and seen < max_entries:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                seen += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_nlink > 1 and not entry.is_dir(follow_symlinks=False):
                    if (st.st_dev, st.st_ino) in inodes:
                        continue
                    inodes.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return total


class _Limits:
    """The run's limits as the wrapper watches them (see the module docstring)."""

    def __init__(self, opts: dict[str, str]) -> None:
        self.dirs = [d for d in opts.get("cgroups", "").split(":") if d]
        # The counter files this group has (found once: a check then reads only these).
        self.counters = [
            (path, key, limit)
            for d in self.dirs
            for path, key, limit in (
                (d + "/memory.oom_control", "oom_kill", "memory"),
                (d + "/memory.events", "oom_kill", "memory"),
                (d + "/pids.events", "max", "pids"),
            )
            if os.path.exists(path)
        ]
        self.disk_dir = opts.get("disk-dir")
        self.disk_max = int(opts.get("disk-max", "0"))
        self.next_check = time.monotonic()
        self.next_disk = self.next_check  # the next walk, at the latest
        self.soonest_disk = self.next_check  # the next walk, at the earliest
        self.disk_used = 0  # what the last walk found
        self.fs_used_at_walk = 0  # the filesystem's use when it began
        self.hit: str | None = None
        self.container = _Container.of(opts)

    @property
    def active(self) -> bool:
        return bool(self.dirs) or (self.disk_dir is not None and self.disk_max > 0)

    def wait_s(self, now: float) -> float:
        return max(0.0, self.next_check - now)

    def check(self, now: float) -> str | None:
        """The limit the run has met (once; None: none yet, or not due)."""
        if self.hit is not None or now < self.next_check:
            return None
        self.next_check = now + LIMIT_CHECK_S
        for path, key, limit in self.counters:
            # Memory first (an OOM kill ends a run; a refused fork may only slow it).
            if _counter(path, key) and self.hit != "memory":
                self.hit = limit
        if self.hit is None and self.disk_dir is not None and self.disk_max > 0:
            self._check_disk(self.disk_dir, now)
        return self.hit

    def _check_disk(self, root: str, now: float) -> None:
        fs_used = _fs_used(root)
        bound = self.disk_used + max(0, fs_used - self.fs_used_at_walk)
        if now < self.soonest_disk or (now < self.next_disk and bound <= self.disk_max):
            return
        self.disk_used = disk_use(root, DISK_WALK_ENTRIES)
        self.fs_used_at_walk = fs_used
        took = time.monotonic() - now
        self.soonest_disk = now + max(DISK_CHECK_S, 10 * took)
        self.next_disk = now + max(DISK_RECHECK_S, 10 * took)
        if self.disk_used > self.disk_max:
            self.hit = "disk"

    def kill(self, agent: int) -> None:
        """End everything of the run: the agent, and every process of its group (a v1
        group has no ``cgroup.kill``; what forks meanwhile is caught next round), and its
        container first (the client's death would not end it)."""
        if self.container is not None:
            self.container.kill()
        try:  # noqa: SIM105  (no contextlib here: see _say)
            os.kill(agent, _signal.SIGKILL)
        except OSError:
            pass
        for _ in range(100):
            pids: set[int] = set()
            for d in self.dirs:
                try:
                    with open(d + "/cgroup.procs") as f:
                        pids.update(int(p) for p in f.read().split() if p.isdigit())
                except OSError:
                    pass
            if not pids:
                return
            for pid in pids:
                try:  # noqa: SIM105
                    os.kill(pid, _signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)
        _say(f"the run's cgroup did not empty: {self.dirs}")


class _Container:
    """The agent's docker container (``--container``): killed, inspected, removed by name
    through the docker client (``subprocess`` is loaded only for these runs)."""

    TIMEOUT_S = 60.0

    def __init__(self, name: str, docker: str) -> None:
        self.name = name
        self.docker = docker

    @classmethod
    def of(cls, opts: dict[str, str]) -> "_Container | None":
        name = opts.get("container")
        return None if name is None else cls(name, opts.get("docker", "docker"))

    def _run(self, *args: str) -> str | None:
        """The client's stdout, or None when it failed (said in the wrapper's log)."""
        import subprocess

        try:
            done = subprocess.run(
                [self.docker, *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            _say(f"docker {args[0]} {self.name}: {exc}")
            return None
        if done.returncode != 0:
            err = done.stderr.decode("utf-8", "replace").strip()
            if "No such container" not in err:
                _say(f"docker {args[0]} {self.name}: {err[-300:]}")
            return None
        return done.stdout.decode("utf-8", "replace")

    def kill(self) -> None:
        self._run("kill", "--signal", "KILL", self.name)

    def oom_killed(self) -> bool:
        return (
            self._run("inspect", "--format", "{{.State.OOMKilled}}", self.name) or ""
        ).strip() == "true"

    def remove(self) -> None:
        self._run("rm", "-f", self.name)


class _CappedFile:
    """One of the agent's output streams: copied from its pipe into its file, up to the
    cap. The first byte dropped writes ``<file>.capped`` with the cause ("cap", or the
    write error that made the rest undeliverable); while bytes keep being dropped its
    mtime moves (at most once a second), so the run does not look silent."""

    def __init__(self, path: str, cap: int) -> None:
        self.path = path
        self.room = cap
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.dropped_at: float | None = None
        # Why bytes were first dropped (None: none were), and how many the file kept.
        self.cause: str | None = None
        self.kept = 0

    def write(self, chunk: bytes) -> None:
        keep = chunk if self.room < 0 else chunk[: self.room]
        if len(keep) < len(chunk):
            self._dropped("cap")
        if self.room >= 0:
            self.room -= len(keep)
        view = memoryview(keep)
        try:
            while view:
                written = os.write(self.fd, view)
                self.kept += written
                view = view[written:]
        except OSError as exc:
            # Disk full, a quota, an I/O error: the agent must not notice (it would have
            # before, writing the file itself); the rest of this stream is read and dropped.
            self.room = 0
            self._dropped(f"write error: {exc.strerror or exc}")

    def _dropped(self, cause: str) -> None:
        marker = self.path + CAPPED_SUFFIX
        now = time.monotonic()
        if self.cause is None:
            self.cause = cause
        try:
            if self.dropped_at is None:
                self.dropped_at = now
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    os.write(fd, cause.encode())
                finally:
                    os.close(fd)
            elif now - self.dropped_at >= 1.0:
                self.dropped_at = now
                os.utime(marker)
        except OSError as exc:
            _say(f"{self.path}: output dropped ({cause}); marker: {exc}")


def _spawn(opts: dict[str, str], command: list[str]) -> tuple[int, dict[int, _CappedFile]]:
    """Start the agent with its stdout and stderr on pipes; return its pid and, per pipe
    read end, the file it is copied into."""
    cap = int(opts.get("cap", "-1"))
    files = {1: _CappedFile(opts["stdout"], cap), 2: _CappedFile(opts["stderr"], cap)}
    pipes: dict[int, _CappedFile] = {}
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = [
        (os.POSIX_SPAWN_OPEN, 0, opts.get("stdin", os.devnull), os.O_RDONLY, 0)
    ]
    write_ends = []
    try:
        for target, file in files.items():
            read_end, write_end = os.pipe()  # close-on-exec: only the dup2 copies pass on
            pipes[read_end] = file
            write_ends.append(write_end)
            actions.append((os.POSIX_SPAWN_DUP2, write_end, target))
        pid = os.posix_spawnp(
            command[0],
            command,
            dict(os.environ),
            file_actions=actions,
            # Python ignores SIGPIPE and SIGXFSZ; the agent gets their defaults back.
            setsigdef=(
                _signal.SIGTERM,
                _signal.SIGINT,
                _signal.SIGHUP,
                _signal.SIGPIPE,
                _signal.SIGXFSZ,
            ),
        )
    except OSError:
        for fd in [*pipes, *write_ends]:
            os.close(fd)
        raise
    for fd in write_ends:
        os.close(fd)
    return pid, pipes


def _copy_until_exit(
    pid: int,
    pipes: dict[int, _CappedFile],
    *,
    exit_file: str = "",
    lifeline: _Lifeline | None = None,
    deadline: float | None = None,
    grace_s: float = 0.0,
    limits: _Limits | None = None,
    container: "_Container | None" = None,
) -> tuple[int, bool, list[_CappedFile]]:
    """Copy the agent's output into its files until it has exited and its pipes are
    drained; return its wait status, whether this wrapper's own deadline ended it, and the
    files.

    The pipes normally reach end-of-file as the agent exits. A leftover child of the agent
    may hold them open: its output is then copied for a short while, and the daemon ends
    such leftovers with the run. With a ``lifeline`` or a ``deadline`` the wrapper may end
    the group itself (see the module docstring); it does not return then."""
    import select

    files = list(pipes.values())
    pidfd = os.pidfd_open(pid)  # readable once the agent has exited; no polling
    status: int | None = None
    drain_until: float | None = None
    term_at: float | None = None
    try:
        while status is None or (pipes and time.monotonic() < (drain_until or 0.0)):
            watched = [*pipes, pidfd] if status is None else list(pipes)
            now = time.monotonic()
            waits = [] if drain_until is None else [drain_until - now]
            if status is None:
                if lifeline is not None:
                    watched.append(lifeline.fd)
                    silence = lifeline.wait_s(now)
                    if silence is not None:
                        waits.append(silence)
                if deadline is not None:
                    waits.append(deadline - now if term_at is None else term_at + grace_s - now)
                if limits is not None and limits.hit is None:
                    waits.append(limits.wait_s(now))
            timeout = max(0.0, min(waits)) if waits else None
            ready, _, _ = select.select(watched, [], [], timeout)
            for fd in ready:
                if lifeline is not None and fd == lifeline.fd:
                    continue
                if fd == pidfd:
                    _, status = os.waitpid(pid, 0)
                    drain_until = time.monotonic() + LEFTOVER_DRAIN_S
                    continue
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    pipes[fd].write(chunk)
                else:
                    os.close(fd)
                    del pipes[fd]
            if status is not None:
                continue
            now = time.monotonic()
            if limits is not None and limits.check(now) is not None:
                limits.kill(pid)
            if lifeline is not None and lifeline.gone(lifeline.fd in ready, now):
                if container is not None:
                    # Nobody is left to remove it (its actor is gone), and the group's KILL
                    # would end only its client.
                    container.remove()
                _end_group(exit_file, {"started": True, "pid": pid, "ended_by": lifeline.why})
            if deadline is not None and term_at is None and now >= deadline:
                term_at = now
                os.killpg(0, _signal.SIGTERM)  # this wrapper only sets a flag
            elif term_at is not None and now >= term_at + grace_s:
                if container is not None:
                    container.remove()
                _end_group(
                    exit_file,
                    {
                        "started": True,
                        "pid": pid,
                        "term_signal": _signal.SIGKILL,
                        "ended_by": "deadline",
                    },
                )
    finally:
        for fd in [pidfd, *pipes, *(file.fd for file in files)]:
            os.close(fd)
    assert status is not None  # the loop ends only once the agent has been waited for
    return status, term_at is not None, files


def _client_exited(pid: int) -> bool:
    """Whether the agent (here: the docker client) has exited (a zombie not yet waited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def _container_network(opts: dict[str, str], container: "_Container", client: int) -> str | None:
    """Forward the model endpoints into the running container, then let its command start
    (see the module docstring); why it could not be done, or None."""
    import importlib

    netns = importlib.import_module(f"{__package__}.netns" if __package__ else "netns")
    try:
        forwards = netns.parse_forwards(opts["container-forward"])
    except ValueError as exc:
        return str(exc)
    give_up = time.monotonic() + CONTAINER_START_S
    while True:
        out = container._run("inspect", "--format", "{{.State.Pid}}", container.name) or ""
        if out.strip().isdigit() and int(out.strip()) > 0:
            break
        if _client_exited(client):
            return "the container ended before it ran"
        if time.monotonic() > give_up:
            return f"the container was not running after {CONTAINER_START_S:g}s"
        time.sleep(0.05)
    try:
        netns.join(f"/proc/{int(out.strip())}/ns/net", forwards).serve()
        ready = os.path.join(os.path.dirname(opts["exit-file"]), NETWORK_READY)
        os.close(os.open(ready, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
    except OSError as exc:
        return str(exc)
    return None


def _enter_network(opts: dict[str, str]) -> None:
    """Move this wrapper, and so the agent it spawns, into the run's own network namespace
    and start forwarding its model endpoints (``arenad/runs/netns.py``)."""
    import importlib

    # A sibling module: "netns" where the launcher put this dir on the path, else the package's.
    netns = importlib.import_module(f"{__package__}.netns" if __package__ else "netns")
    mode = opts["network"]
    if mode not in ("none", "model"):
        raise ValueError(f"--network must be none or model, not {mode!r}")
    forwards = netns.parse_forwards(opts.get("forward", "")) if mode == "model" else []
    netns.enter(forwards).serve()


def main(argv: list[str]) -> int:
    # The agent must inherit nothing but its three standard descriptors: whoever started
    # this wrapper (the launcher's fork, or a fresh interpreter) may have left others open,
    # and everything the wrapper opens itself is close-on-exec.
    opts, command = _parse(argv)
    # The lifeline (a cluster run's, fd 3 from the launcher) is the one kept, and it is
    # close-on-exec (see _Lifeline).
    keep = int(opts["lifeline"]) if "lifeline" in opts else None
    if keep is None:
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    else:
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
    for sig in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(sig, _on_signal)
    exit_file = opts["exit-file"]
    me: dict[str, object] = {"wrapper_pid": os.getpid()}
    lifeline = None
    if "lifeline" in opts:
        lifeline = _Lifeline(int(opts["lifeline"]), float(opts.get("lifeline-silence", "0")))
    deadline_s = float(opts.get("deadline-s", "0"))
    deadline = time.monotonic() + deadline_s if deadline_s > 0 else None
    if not _wait_for_release(opts, lifeline):
        # Nothing ran, so nothing is owed to anyone: written if it can be, not kept.
        held: dict[str, object] = {**me, "started": False, "error": "not released"}
        if lifeline is not None and lifeline.why:
            held["ended_by"] = lifeline.why
        try:
            _write_exit_record(exit_file, held)
        except OSError as exc:
            _say(f"cannot write {exit_file}: {exc.strerror or exc}")
        return NOT_STARTED_EXIT
    try:
        if "network" in opts:
            _enter_network(opts)
    except (OSError, ValueError) as exc:
        _finish(
            exit_file,
            {
                **me,
                "started": False,
                "error": f"could not make the run's network ({opts['network']}): {exc}",
                "ended_at_ms": time.time_ns() // 1_000_000,
            },
        )
        return 127
    try:
        os.chdir(opts["cwd"])
        if "container-forward" in opts:
            # A leftover of an earlier attempt must not let this one start unforwarded.
            try:  # noqa: SIM105
                os.unlink(os.path.join(os.path.dirname(exit_file), NETWORK_READY))
            except FileNotFoundError:
                pass
        pid, pipes = _spawn(opts, command)
    except OSError as exc:
        _finish(
            exit_file,
            {
                **me,
                "started": False,
                "error": f"could not start {command[0]!r}: {exc.strerror or exc}",
                "ended_at_ms": time.time_ns() // 1_000_000,
            },
        )
        return 127
    limits = _Limits(opts)
    net_error = None
    if limits.container is not None and "container-forward" in opts:
        net_error = _container_network(opts, limits.container, pid)
        if net_error is not None:
            limits.container.kill()
    status, deadline_hit, files = _copy_until_exit(
        pid,
        pipes,
        exit_file=exit_file,
        lifeline=lifeline,
        deadline=deadline,
        grace_s=float(opts.get("grace", "0")),
        limits=limits if limits.active else None,
        container=limits.container,
    )
    if limits.active and limits.hit is None:
        # A limit met as the run ended (v2's oom.group killed it before our next look).
        limits.next_check = 0.0
        limits.soonest_disk = limits.next_disk = float("inf")
        limits.check(time.monotonic())
    if limits.container is not None:
        if limits.hit is None and limits.container.oom_killed():
            limits.hit = "memory"
        limits.container.remove()
    if net_error is not None:
        _finish(
            exit_file,
            {
                **me,
                "started": False,
                "error": f"could not make the container's network (model): {net_error}",
                "ended_at_ms": time.time_ns() // 1_000_000,
            },
        )
        return 127
    exit_status = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    term_signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    record: dict[str, object] = {
        **me,
        "started": True,
        "pid": pid,
        "exit_status": exit_status,
        "term_signal": term_signal,
        "ended_at_ms": time.time_ns() // 1_000_000,
    }
    cut = [f for f in files if f.cause is not None]
    if cut:
        # Here too, not only in the markers: on a full disk a marker may exist but be empty.
        record["capped"] = {f.path: f.cause for f in cut}
        record["kept"] = {f.path: f.kept for f in cut}
    if deadline_hit:
        record["ended_by"] = "deadline"
    if limits.hit is not None:
        record["limit"] = limits.hit
    _finish(exit_file, record)
    return exit_status if exit_status is not None else 128 + (term_signal or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
