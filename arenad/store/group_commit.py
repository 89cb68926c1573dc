"""Group commit: appends from many tasks that arrive together go into one transaction.

A daemon running hundreds of cells ingests a few lines per cell per second, each watcher
appending its own small batch. One transaction per batch costs a fixed handful of
round trips to the store's thread whatever its size (see :mod:`arenad.store.sqlite`), so
at 500 cells the log spent most of the daemon's CPU on transaction overhead for one or
two events each, and its lock queue put seconds of lag on every line. Here, while one
transaction is being written, the requests that arrive queue up; the next transaction
takes all of them (up to a bound), so the number of transactions follows the store's
speed, not the number of writers.

Each caller still gets its own outcome: a combined transaction that fails for any reason
but an unwritable store is retried request by request, so one stream's lost race
(:class:`~arenad.errors.ConcurrencyError`) or refused event fails only its own caller.
A caller that is cancelled while its request waits may still find it committed: like any
append whose caller vanished mid-commit, what is in the log is what happened (ingestion
resumes from logged offsets).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from arenad.errors import StoreUnwritable
from arenad.store.base import AppendRequest, EventStore
from events.base import Recorded

# Requests per combined transaction: enough for every cell of a large daemon at once,
# few enough that the version lookup stays one statement (arenad.store.sqlite._CHUNK).
MAX_REQUESTS = 500

_Pending = tuple[Sequence[AppendRequest], "asyncio.Future[list[list[Recorded]]]"]


class GroupCommit:
    """Appends to ``store`` that arrive while a transaction is in flight share the next."""

    def __init__(self, store: EventStore, *, max_requests: int = MAX_REQUESTS) -> None:
        self.store = store
        self.max_requests = max_requests
        self._queue: list[_Pending] = []
        self._writer: asyncio.Task[None] | None = None
        # For benches and diagnostics: transactions written, requests they carried.
        self.transactions = 0
        self.requests = 0

    async def append(self, request: AppendRequest) -> list[Recorded]:
        """``request`` committed (alone or with others); its events as recorded."""
        return (await self.append_many([request]))[0]

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[list[Recorded]]:
        """``requests`` committed together, atomically (and maybe with others')."""
        done: asyncio.Future[list[list[Recorded]]] = asyncio.get_running_loop().create_future()
        self._queue.append((requests, done))
        if self._writer is None or self._writer.done():
            # Its own task: a caller cancelled mid-wait must not stop everyone's commit.
            self._writer = asyncio.create_task(self._write(), name="arenad-group-commit")
        return await done

    async def _write(self) -> None:
        while self._queue:
            batch: list[_Pending] = []
            count = 0
            while self._queue and (
                not batch or count + len(self._queue[0][0]) <= self.max_requests
            ):
                pending = self._queue.pop(0)
                batch.append(pending)
                count += len(pending[0])
            try:
                await self._commit(batch)
            except BaseException as exc:
                # Cancelled (the loop is closing): nobody may be left waiting.
                for _, done in [*batch, *self._queue]:
                    _fail(done, exc)
                self._queue.clear()
                raise

    async def _commit(self, batch: list[_Pending]) -> None:
        flat = [r for requests, _ in batch for r in requests]
        try:
            recorded = await self.store.append_many(flat)
        except StoreUnwritable as exc:
            for _, done in batch:
                _fail(done, exc)
            return
        except Exception as exc:
            if len(batch) == 1:
                _fail(batch[0][1], exc)
                return
            # Someone's request is at fault: each caller's on its own, so only it fails.
            for requests, done in batch:
                try:
                    result = await self.store.append_many(requests)
                except Exception as own:
                    _fail(done, own)
                else:
                    self._count(1, len(requests))
                    if not done.done():
                        done.set_result(result)
            return
        self._count(1, len(flat))
        position = 0
        for requests, done in batch:
            mine = recorded[position : position + len(requests)]
            position += len(requests)
            if not done.done():
                done.set_result(mine)

    def _count(self, transactions: int, requests: int) -> None:
        self.transactions += transactions
        self.requests += requests


def _fail(done: asyncio.Future[list[list[Recorded]]], exc: BaseException) -> None:
    if not done.done():
        done.set_exception(exc)
