"""A writer killed with SIGKILL in the middle of a batch leaves only whole batches
and a chain that verifies."""

from __future__ import annotations

import asyncio
import collections
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from arenad.store.sqlite import SqliteEventStore
from tests.store.helpers import REPO, run_arenad

# Each batch is one transaction of 1 000 events over two streams (600 + 400), every
# event carrying its batch number in `offset`; the writer prints the number after
# each commit.
WRITER = """
import asyncio, sys
from pathlib import Path
from arenad.store.base import AppendRequest
from arenad.store.sqlite import SqliteEventStore
from events.ingest import LineIngested

async def main(path):
    store = await SqliteEventStore.open(Path(path))
    batch = await store.last_seq() // 1000
    while True:
        def ev(i):
            return LineIngested(source="s", path="p", offset=batch, length=i, raw="x" * 40)
        await store.append_many([
            AppendRequest("kill/a", None, [ev(i) for i in range(600)]),
            AppendRequest("kill/b", None, [ev(i) for i in range(600, 1000)]),
        ])
        print(batch, flush=True)
        batch += 1

asyncio.run(main(sys.argv[1]))
"""


def _kill_mid_batch(path: Path, rng: random.Random) -> int:
    """Start the writer, let it commit some batches, SIGKILL it; return the last
    batch number it reported committed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        wanted = rng.randint(1, 6)
        last = -1
        for _ in range(wanted):
            reported = proc.stdout.readline()
            assert reported, proc.stderr.read() if proc.stderr else "writer died"
            last = int(reported)
        # A random moment inside the following batches (not a wait for anything:
        # the kill must land at an arbitrary point of the writer's work).
        time.sleep(rng.uniform(0, 0.02))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        return last
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def _check(path: Path, committed: int) -> int:
    store = await SqliteEventStore.open(path)
    try:
        per_batch: collections.Counter[int] = collections.Counter()
        per_stream: collections.Counter[str] = collections.Counter()
        async for r in store.read_all():
            per_batch[r.event.offset] += 1  # type: ignore[attr-defined]
            per_stream[r.stream] += 1
        total = sum(per_batch.values())
        assert total % 1000 == 0, total
        assert set(per_batch.values()) <= {1000}, "a batch was partly written"
        assert sorted(per_batch) == list(range(total // 1000)), "batches missing"
        assert per_stream["kill/a"] * 400 == per_stream["kill/b"] * 600
        # What the writer reported committed survived the kill.
        assert total >= (committed + 1) * 1000
        assert await store.last_seq() == total
        report = await store.verify_chain()
        assert report.ok and report.rows == total, report
        return total
    finally:
        await store.close()


def test_sigkill_mid_batch_leaves_whole_batches_and_a_valid_chain(tmp_path: Path) -> None:
    path = tmp_path / "home" / "arenad.db"
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    previous = 0
    for _round in range(4):
        committed = _kill_mid_batch(path, rng)
        total = asyncio.run(_check(path, committed))
        assert total > previous
        previous = total
    done = run_arenad(path.parent, "verify-log")
    assert done.returncode == 0, done.stderr
    assert f"{previous} events" in done.stdout
