"""The projection's worker processes: the cells of a big ledger projected on every core.

A cell's lines depend on its streams alone, so a ledger's batches of cells can be
projected side by side. ``LedgerWorkers(n, db)`` starts ``python -m arenad.ledger.workers
DB`` n times; each opens the store's file itself (reads only) and runs
``arenad.ledger.batch.project_batch`` on the batches it is sent. ``submit`` hands a batch
(its cell ids and run ids) to the next worker in turn; ``result`` returns the oldest
batch's lines. Results are taken in the order the batches were sent, so the ledger's
bytes are the ones one process writes.

The protocol, on each worker's stdin and stdout: frames of a 4-byte big-endian length and
a msgpack body; a request is a list of (cell id, run id), a reply a ``_Reply``. Requests
are a few KiB and at most two wait per worker, so writing one never waits on a worker
that is itself waiting for its reply to be read.

A batch a worker cannot project comes back as its error, raised here as what one process
would have raised: ``InvalidRolloutLine`` (naming the cell) or ``StoreError`` (naming a
row that cannot be read); any other error as ``LedgerWorkerFailed``, its traceback on
stderr. A worker that exits early fails the projection the same way. The caller then
writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import traceback
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import msgspec

from arenad.errors import ArenadError, StoreError
from arenad.ledger.batch import BatchLines, project_batch
from arenad.ledger.rollout import InvalidRolloutLine
from arenad.store.sqlite import SqliteEventStore

__all__ = ["LedgerWorkerFailed", "LedgerWorkers", "serve"]

# A reply holds a batch's lines (about a MiB for 32 cells of 30-message transcripts).
_STREAM_LIMIT = 1 << 20
_LENGTH = 4


class LedgerWorkerFailed(ArenadError):
    """A ledger worker process died or could not project a batch (nothing was written)."""


class _Reply(msgspec.Struct, frozen=True, array_like=True):
    lines: BatchLines | None = None
    # When it failed: the error's class when it is one of ``_RAISED_AS_ITSELF``, and
    # its message.
    error_kind: str | None = None
    error: str | None = None


# Errors a batch meets with good code and a bad log: raised in the parent as themselves.
_RAISED_AS_ITSELF: dict[str, type[ArenadError]] = {
    "InvalidRolloutLine": InvalidRolloutLine,
    "StoreError": StoreError,
}

_encode = msgspec.msgpack.Encoder().encode
_decode_request = msgspec.msgpack.Decoder(list[tuple[str, str]]).decode
_decode_reply = msgspec.msgpack.Decoder(_Reply).decode


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(_LENGTH, "big") + body


class _Worker:
    def __init__(self, index: int, process: asyncio.subprocess.Process) -> None:
        self.index = index
        self.process = process

    async def send(self, cells: Sequence[tuple[str, str]]) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(_frame(_encode(list(cells))))
            await stdin.drain()
        except ConnectionError:
            raise await self._exited() from None

    async def _exited(self) -> LedgerWorkerFailed:
        code = await self.process.wait()
        return LedgerWorkerFailed(f"ledger worker {self.index} exited with status {code}")

    async def reply(self) -> BatchLines:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            size = int.from_bytes(await stdout.readexactly(_LENGTH), "big")
            reply = _decode_reply(await stdout.readexactly(size))
        except asyncio.IncompleteReadError:
            raise await self._exited() from None
        if reply.lines is not None:
            return reply.lines
        itself = _RAISED_AS_ITSELF.get(reply.error_kind or "")
        if itself is not None:
            raise itself(reply.error)
        raise LedgerWorkerFailed(f"ledger worker {self.index}: {reply.error}")


class LedgerWorkers:
    """``count`` worker processes projecting from the store in ``db`` (an async context
    manager; see the module docstring)."""

    def __init__(self, count: int, db: Path) -> None:
        self.count = count
        self.db = db
        self._workers: list[_Worker] = []
        self._pending: deque[_Worker] = deque()
        self._sent = 0

    async def __aenter__(self) -> LedgerWorkers:
        try:
            for index in range(self.count):
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "arenad.ledger.workers",
                    str(self.db),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    limit=_STREAM_LIMIT,
                )
                self._workers.append(_Worker(index, process))
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
        """Send a batch (cell id, run id) to the next worker in turn."""
        worker = self._workers[self._sent % self.count]
        self._sent += 1
        await worker.send(cells)
        self._pending.append(worker)

    async def result(self) -> BatchLines:
        """The lines of the oldest batch not yet taken."""
        return await self._pending.popleft().reply()

    async def _stop(self, *, kill: bool) -> None:
        for worker in self._workers:
            if kill:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.kill()
            elif worker.process.stdin is not None:
                worker.process.stdin.close()  # end of input: the worker exits
        for worker in self._workers:
            await worker.process.wait()


def _read_frame(stream: BinaryIO) -> bytes | None:
    head = stream.read(_LENGTH)
    if len(head) < _LENGTH:
        return None
    size = int.from_bytes(head, "big")
    body = stream.read(size)
    return body if len(body) == size else None


async def serve(db: Path, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """A worker's loop: project each batch read, answer, until the input ends. (Reading
    stdin blocks the loop, which has nothing else to do meanwhile.)"""
    store = await SqliteEventStore.open(db, migrate=False)
    try:
        while (body := _read_frame(stdin)) is not None:
            try:
                reply = _Reply(lines=await project_batch(store, _decode_request(body)))
            except (InvalidRolloutLine, StoreError) as exc:
                reply = _Reply(error_kind=type(exc).__name__, error=str(exc))
            except Exception as exc:
                # A bug: named to the parent, which fails the projection; its traceback
                # on the parent's stderr, for the report.
                traceback.print_exc()
                reply = _Reply(error=f"{type(exc).__name__}: {exc}")
            stdout.write(_frame(_encode(reply)))
            stdout.flush()
    finally:
        await store.close()


if __name__ == "__main__":
    # A projection allocates millions of acyclic objects that reference counting frees
    # cell by cell: the cycle collector would only keep re-scanning them (as in
    # ``arenad.ledger.service``).
    gc.disable()
    asyncio.run(serve(Path(sys.argv[1]), sys.stdin.buffer, sys.stdout.buffer))
