"""The projection's worker processes: the cells of a big ledger projected on every core.

A cell's lines depend on its streams alone, so a ledger's batches of cells can be
projected side by side. ``LedgerWorkers(n, db)`` starts n processes running
``python -m arenad.ledger.workers DB [HEAD]``; each opens the store's file read-only and runs
``arenad.ledger.batch.project_batch`` on the batches it is sent. ``submit`` hands a batch
(its cell ids and run ids) to the next worker in turn; ``result`` returns the oldest
batch's lines. Results are taken in the order the batches were sent, so the ledger's
bytes are the ones one process writes.

The workers run the parent's arenad: the package's directory leads their ``sys.path``
(``-P`` keeps the working directory out of it), and each names the arenad it loaded in
its first frame, which must be the parent's.

The protocol, on each worker's stdin and stdout: frames of a 4-byte big-endian length and
a msgpack body. A worker's first frame is a ``_Hello``; then one ``_Reply`` per request,
a request being (run id, cell ids) groups. Every worker's stdout is read by a task of its
own as frames arrive, whatever the parent awaits, so a worker never waits on a full pipe
and the parent never waits on a worker that does: not while projecting, not when a batch
fails, not when the workers are stopped.

A batch a worker cannot project comes back as its error, raised here as what one process
would have raised: ``InvalidRolloutLine`` (naming the cell) or a ``StoreError`` (naming a
row that cannot be read); any other error as ``LedgerWorkerFailed``, its traceback on
stderr. A worker that exits early, or with a non-zero status, fails the projection the
same way. The caller then writes nothing. Workers ignore SIGINT: an interrupt at the
terminal reaches the parent alone (the workers have their own session), which stops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
import traceback
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import msgspec

import arenad
from arenad.errors import ArenadError, StoreError
from arenad.ledger.batch import BatchLines, project_batch
from arenad.ledger.lineage import Head
from arenad.ledger.rollout import InvalidRolloutLine
from arenad.store.sqlite import SqliteEventStore

__all__ = ["LedgerWorkerFailed", "LedgerWorkers", "serve"]

_LENGTH = 4
# The directory arenad is loaded from (the one the workers must load it from too).
_ARENAD = str(Path(arenad.__file__).resolve().parent)


class LedgerWorkerFailed(ArenadError):
    """A ledger worker process died or could not project a batch (nothing was written)."""


class _Hello(msgspec.Struct, frozen=True, array_like=True):
    # The directory of the arenad package the worker loaded.
    arenad: str
    # Why it cannot serve (its store would not open), or None.
    error: str | None = None


class _Reply(msgspec.Struct, frozen=True, array_like=True):
    lines: BatchLines | None = None
    # When it failed: the class of an error raised as itself (``_RAISED_AS_ITSELF``), and
    # the error's message.
    error_kind: str | None = None
    error: str | None = None


# Errors a batch meets with good code and a bad log: raised in the parent as themselves.
_RAISED_AS_ITSELF: dict[str, type[ArenadError]] = {
    "InvalidRolloutLine": InvalidRolloutLine,
    "StoreError": StoreError,
}

_Request = list[tuple[str, list[str]]]
_encode = msgspec.msgpack.Encoder().encode
_decode_request = msgspec.msgpack.Decoder(_Request).decode
_decode_hello = msgspec.msgpack.Decoder(_Hello).decode
_decode_reply = msgspec.msgpack.Decoder(_Reply).decode


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(_LENGTH, "big") + body


def _request(cells: Sequence[tuple[str, str]]) -> _Request:
    """(cell id, run id) pairs as (run id, cell ids) groups: a run id, which a user may
    make as long as they like, is sent once per group, not once per cell."""
    groups: _Request = []
    for cell_id, run_id in cells:
        if not groups or groups[-1][0] != run_id:
            groups.append((run_id, []))
        groups[-1][1].append(cell_id)
    return groups


def _cells(request: _Request) -> list[tuple[str, str]]:
    return [(cell_id, run_id) for run_id, cell_ids in request for cell_id in cell_ids]


def _raised_as(kind: type[BaseException]) -> str | None:
    """The ``_RAISED_AS_ITSELF`` key of an error's class or its nearest such base."""
    return next((k.__name__ for k in kind.__mro__ if k.__name__ in _RAISED_AS_ITSELF), None)


class _Worker:
    def __init__(self, index: int, process: asyncio.subprocess.Process) -> None:
        self.index = index
        self.process = process
        # Frames as they arrive; None once the worker's output has ended.
        self.frames: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            while True:
                size = int.from_bytes(await stdout.readexactly(_LENGTH), "big")
                self.frames.put_nowait(await stdout.readexactly(size))
        except asyncio.IncompleteReadError:
            self.frames.put_nowait(None)

    async def frame(self) -> bytes:
        body = await self.frames.get()
        if body is None:
            raise await self._exited()
        return body

    async def _exited(self) -> LedgerWorkerFailed:
        code = await self.process.wait()
        return LedgerWorkerFailed(f"ledger worker {self.index} exited with status {code}")

    async def hello(self) -> None:
        hello = _decode_hello(await self.frame())
        if hello.error is not None:
            raise LedgerWorkerFailed(f"ledger worker {self.index}: {hello.error}")
        if hello.arenad != _ARENAD:
            raise LedgerWorkerFailed(
                f"ledger worker {self.index} loaded arenad from {hello.arenad}, not {_ARENAD}"
            )

    async def send(self, cells: Sequence[tuple[str, str]]) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(_frame(_encode(_request(cells))))
            await stdin.drain()
        except ConnectionError:
            raise await self._exited() from None

    async def reply(self) -> BatchLines:
        reply = _decode_reply(await self.frame())
        if reply.lines is not None:
            return reply.lines
        itself = _RAISED_AS_ITSELF.get(reply.error_kind or "")
        if itself is not None:
            raise itself(reply.error)
        raise LedgerWorkerFailed(f"ledger worker {self.index}: {reply.error}")

    async def stop(self, *, kill: bool) -> None:
        if kill:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        elif self.process.stdin is not None:
            self.process.stdin.close()  # end of input: the worker exits
        # Read its output to the end (asyncio's wait() returns only once every pipe is
        # closed, and a pipe nobody reads never is), then reap it.
        await self.reader
        code = await self.process.wait()
        if not kill and code != 0:
            raise LedgerWorkerFailed(f"ledger worker {self.index} exited with status {code}")


class LedgerWorkers:
    """``count`` worker processes projecting from the store in ``db`` (an async context
    manager; see the module docstring)."""

    def __init__(self, count: int, db: Path, head: Head | None = None) -> None:
        self.count = count
        self.db = db
        # The log's head for lines with their lineage (``--lineage``), sent to every
        # worker once, as its argument: the same for every batch of the projection.
        self.head = head
        self._workers: list[_Worker] = []
        self._pending: deque[_Worker] = deque()
        self._sent = 0

    async def __aenter__(self) -> LedgerWorkers:
        inherited = os.environ.get("PYTHONPATH")
        path = [str(Path(_ARENAD).parent), *([inherited] if inherited else [])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
        try:
            for index in range(self.count):
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-P",
                    "-m",
                    "arenad.ledger.workers",
                    str(self.db),
                    *([msgspec.json.encode(self.head).decode()] if self.head is not None else []),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    env=env,
                    # Out of the terminal's process group: ^C reaches the parent alone,
                    # which stops its workers (even while they still start up).
                    start_new_session=True,
                )
                self._workers.append(_Worker(index, process))
            for worker in self._workers:
                await worker.hello()
        except BaseException:
            await self._stop(kill=True)
            raise
        return self

    async def __aexit__(self, kind: object, error: object, tb: object) -> None:
        await self._stop(kill=error is not None)

    @property
    def pending(self) -> int:
        """Batches sent whose result has not been taken."""
        return len(self._pending)

    async def submit(self, cells: Sequence[tuple[str, str]]) -> None:
        """Send a batch, (cell id, run id) pairs, to the next worker in turn."""
        worker = self._workers[self._sent % self.count]
        self._sent += 1
        await worker.send(cells)
        self._pending.append(worker)

    async def result(self) -> BatchLines:
        """The lines of the oldest batch not yet taken."""
        return await self._pending.popleft().reply()

    async def _stop(self, *, kill: bool) -> None:
        failures: list[LedgerWorkerFailed] = []
        for worker in self._workers:
            try:
                await worker.stop(kill=kill)
            except LedgerWorkerFailed as exc:
                failures.append(exc)
        if failures:
            raise failures[0]


def _read_frame(stream: BinaryIO) -> bytes | None:
    head = stream.read(_LENGTH)
    if len(head) < _LENGTH:
        return None
    size = int.from_bytes(head, "big")
    body = stream.read(size)
    return body if len(body) == size else None


def _write_frame(stream: BinaryIO, message: msgspec.Struct) -> None:
    stream.write(_frame(_encode(message)))
    stream.flush()


async def serve(db: Path, stdin: BinaryIO, stdout: BinaryIO, head: Head | None = None) -> None:
    """A worker's loop: say which arenad it runs, then project each batch read and
    answer (with lineage at ``head`` when given), until the input ends. (Reading stdin
    blocks the loop, which has nothing else to do meanwhile.)"""
    try:
        store = await SqliteEventStore.open_reader(db)
    except StoreError as exc:
        _write_frame(stdout, _Hello(arenad=_ARENAD, error=str(exc)))
        return
    _write_frame(stdout, _Hello(arenad=_ARENAD))
    try:
        while (body := _read_frame(stdin)) is not None:
            try:
                reply = _Reply(
                    lines=await project_batch(store, _cells(_decode_request(body)), head)
                )
            except Exception as exc:
                kind = _raised_as(type(exc))
                if kind is None:
                    # A bug: named to the parent, which fails the projection; its
                    # traceback on the parent's stderr, for the report.
                    traceback.print_exc()
                    reply = _Reply(error=f"{type(exc).__name__}: {exc}")
                else:
                    reply = _Reply(error_kind=kind, error=str(exc))
            _write_frame(stdout, reply)
    finally:
        await store.close()


if __name__ == "__main__":
    # The parent stops its workers: an interrupt sent to this process's group as well
    # (``kill -INT -<pgid>``) must not end a worker on its own, mid-batch.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A projection allocates millions of acyclic objects that reference counting frees
    # cell by cell: the cycle collector would only keep re-scanning them (as in
    # ``arenad.ledger.service``).
    gc.disable()
    head = msgspec.json.decode(sys.argv[2], type=Head) if len(sys.argv) > 2 else None
    asyncio.run(serve(Path(sys.argv[1]), sys.stdin.buffer, sys.stdout.buffer, head))
