"""A run's own network namespace, and the forwarder that lets its model endpoints in.

The run wrapper (``arenad/runs/wrapper.py``) loads this module (standard library only, like
the wrapper) when a run's network is not the host's. Before the agent starts, :func:`enter`
moves the wrapper into a fresh network namespace (``unshare(CLONE_NEWNET)``: the wrapper runs
as root), brings its loopback up, and binds one listener per forwarded endpoint on
``127.0.0.1:<port>`` (and ``[::1]:<port>`` where IPv6 exists) *inside* it. The agent,
spawned next, inherits the namespace: it sees only that loopback, so every host port
(``arenad view``, Ray, another campaign's model server) and every outside address is
unreachable, and its configured base URL (``http://127.0.0.1:<port>/v1``) keeps working.

:meth:`Namespace.serve` then starts a thread that returns to the host's namespace with
``setns`` (namespaces are per thread; a socket stays in the namespace it was made in), accepts
on the inside listeners and copies each connection to its upstream target on the host (a
TCP ``host:port`` or a unix socket, such as a model gateway's). Because the forwarder lives in
the wrapper, it lives exactly as long as the run: through a daemon restart, and not a moment
after the agent (the wrapper's exit closes it).

Bounded: at most :data:`MAX_CONNECTIONS` connections at once (more wait in the listen
backlog, unaccepted), and each direction of a connection holds one :data:`CHUNK` in flight
(a blocking ``recv`` then ``sendall``: a slow reader stalls its writer, nothing queues).
"""

import ctypes
import fcntl
import os
import socket
import struct
import threading

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
# struct ifreq: a 16-byte name, then a 24-byte union whose first member is the flags.
_IFREQ = "16sH22x"
MAX_CONNECTIONS = 64
CHUNK = 64 << 10
CONNECT_TIMEOUT_S = 10.0
# Each connection costs two threads; their stacks need little.
THREAD_STACK_BYTES = 256 << 10
# Separates forwards in the wrapper's --forward option (never in a target: refused earlier).
SEPARATOR = ","


class NetworkError(OSError):
    """The namespace or a listener could not be made (the message says which)."""


def _libc_call(name: str, *args: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise NetworkError(err, f"{name}: {os.strerror(err)}")


def lo_up() -> None:
    """Bring this thread's namespace's loopback up (a new namespace starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        got = fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0))
        flags = struct.unpack(_IFREQ, got)[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | IFF_UP))


def parse_forwards(text: str) -> list[tuple[int, str]]:
    """``PORT=TARGET[,PORT=TARGET...]`` as (port, target) pairs; TARGET is ``host:port``
    or an absolute unix socket path."""
    out = []
    for item in filter(None, text.split(SEPARATOR)):
        port, sep, target = item.partition("=")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not target:
            raise ValueError(f"bad forward {item!r} (PORT=HOST:PORT or PORT=/unix/socket)")
        out.append((int(port), target))
    return out


def _connect(target: str) -> socket.socket:
    if target.startswith("/"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(CONNECT_TIMEOUT_S)
            s.connect(target)
        except OSError:
            s.close()
            raise
        s.settimeout(None)
        return s
    host, _, port = target.rpartition(":")
    s = socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S)
    s.settimeout(None)
    return s


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until end of file (then half-close ``dst``) or an error (then
    shut both down, which also ends the other direction's pump)."""
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        for s in (src, dst):
            try:  # noqa: SIM105  (contextlib is not imported on the wrapper's path)
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return
    try:  # noqa: SIM105
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class Namespace:
    """The network namespace this process entered, and its listeners."""

    def __init__(self, host_fd: int | None, listeners: list[tuple[socket.socket, str]]) -> None:
        self.host_fd = host_fd
        self.listeners = listeners
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def serve(self) -> None:
        """Start forwarding (a daemon thread: it ends with the process)."""
        if not self.listeners:
            return
        threading.stack_size(THREAD_STACK_BYTES)
        threading.Thread(target=self._accept_loop, name="forwarder", daemon=True).start()

    def _accept_loop(self) -> None:
        import selectors

        # Back to the host's namespace for this thread (and the threads it starts): the
        # upstream connections are made there.
        assert self.host_fd is not None
        _libc_call("setns", self.host_fd, CLONE_NEWNET)
        os.close(self.host_fd)
        self.host_fd = None
        selector = selectors.DefaultSelector()
        for listener, target in self.listeners:
            selector.register(listener, selectors.EVENT_READ, target)
        while True:
            self.slots.acquire()
            ready = selector.select()
            key = ready[0][0]
            try:
                conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
            except OSError:
                self.slots.release()
                continue
            threading.Thread(target=self._connection, args=(conn, key.data), daemon=True).start()

    def _connection(self, client: socket.socket, target: str) -> None:
        try:
            try:
                upstream = _connect(target)
            except (OSError, ValueError):
                # The agent sees its endpoint refuse, as it would on the host.
                return
            with upstream:
                back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
                back.start()
                _pump(client, upstream)
                back.join()
        finally:
            client.close()
            self.slots.release()


def _listen(forwards: list[tuple[int, str]]) -> list[tuple[socket.socket, str]]:
    """One listener per forward on this thread's loopback (and [::1] where IPv6 exists)."""
    listeners: list[tuple[socket.socket, str]] = []
    try:
        for port, target in forwards:
            for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
                s = socket.socket(family, socket.SOCK_STREAM)
                try:
                    if family == socket.AF_INET6:
                        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    s.bind((address, port))
                    s.listen(MAX_CONNECTIONS)
                except OSError as exc:
                    s.close()
                    if family == socket.AF_INET:
                        raise NetworkError(
                            exc.errno, f"listen on 127.0.0.1:{port}: {exc.strerror or exc}"
                        ) from None
                    continue  # no IPv6 here: 127.0.0.1 is enough
                listeners.append((s, target))
    except BaseException:
        for s, _ in listeners:
            s.close()
        raise
    return listeners


def enter(forwards: list[tuple[int, str]]) -> Namespace:
    """Move this process (it must have one thread) into a new network namespace with only
    loopback, listening inside on each forward's port. Raises NetworkError."""
    host_fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _libc_call("unshare", CLONE_NEWNET)
        try:
            lo_up()
        except OSError as exc:
            raise NetworkError(exc.errno, f"loopback up: {exc.strerror or exc}") from None
        listeners = _listen(forwards)
    except BaseException:
        os.close(host_fd)
        raise
    if not listeners:
        os.close(host_fd)
        return Namespace(None, [])
    return Namespace(host_fd, listeners)


def join(ns_path: str, forwards: list[tuple[int, str]]) -> Namespace:
    """Listen on each forward's port inside another process's network namespace
    (``/proc/PID/ns/net``: a ``--network none`` container's), then come back: this thread
    stays in its own namespace, the listeners stay in that one. Raises NetworkError."""
    host_fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target_fd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        os.close(host_fd)
        raise NetworkError(exc.errno, f"{ns_path}: {exc.strerror or exc}") from None
    try:
        _libc_call("setns", target_fd, CLONE_NEWNET)
        try:
            lo_up()
            listeners = _listen(forwards)
        finally:
            _libc_call("setns", host_fd, CLONE_NEWNET)
    except BaseException:
        os.close(host_fd)
        raise
    finally:
        os.close(target_fd)
    if not listeners:
        os.close(host_fd)
        return Namespace(None, [])
    return Namespace(host_fd, listeners)


def _probe(result: list[str | None]) -> None:
    try:
        _libc_call("unshare", CLONE_NEWNET)
        lo_up()
        result.append(None)
    except OSError as exc:
        result.append(exc.strerror or str(exc))


def probe() -> str | None:
    """Why this process cannot give a run its own network namespace (None: it can). Tried
    in a throwaway thread: a namespace is per thread, so the caller's stays as it was."""
    result: list[str | None] = []
    thread = threading.Thread(target=_probe, args=(result,), name="netns-probe")
    thread.start()
    thread.join()
    return result[0] if result else "the probe thread died"


_problem: list[str | None] = []


def problem() -> str | None:
    """Why no run on this machine can get its own network namespace, as a line for the user
    (None: it can); probed once per process."""
    if not _problem:
        why = probe()
        _problem.append(
            None
            if why is None
            else "[sandbox] network needs a network namespace per run, which this machine"
            f' refuses ({why}; arenad must run as root); set network = "host" to opt out'
        )
    return _problem[0]
