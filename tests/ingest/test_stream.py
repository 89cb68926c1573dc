from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from arenad.ingest.offsets import fold_positions
from arenad.ingest.stream import StreamIngester
from events.ingest import IngestionClosed, LineIngested, LineMalformed
from tests.ingest._util import Recorder, rebuild, until

_CHILD = r"""
import sys, time
out = sys.stdout.buffer
for i in range(30):
    out.write(b'{"type":"step_start","i":%d}\n' % i)
    out.flush()
    if i % 10 == 0:
        time.sleep(0.01)
out.write(b"garbage\n")
out.write(b'{"type":"text","i":"\xff"}\n')
out.write(b'{"type":"step_finish"}')
out.flush()
"""


async def _feed(ingester: StreamIngester, stdout: asyncio.StreamReader) -> bytes:
    """What proc.py will do: readline, call back with (line, offset)."""
    seen = b""
    while line := await stdout.readline():
        await ingester.on_line(line, len(seen))
        seen += line
    return seen


async def test_child_stdout_is_ingested_byte_for_byte() -> None:
    sink = Recorder()
    ingester = StreamIngester(sink)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CHILD, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    seen = await _feed(ingester, proc.stdout)
    assert await proc.wait() == 0
    final = await ingester.close()
    assert final.offset == len(seen)
    assert rebuild(sink.events, "oc.jsonl") == seen
    lines = sink.lines("oc.jsonl", "stdout")
    assert {e.kind for e in lines if isinstance(e, LineIngested)} == {"step_start", "step_finish"}
    garbage, bad_utf8, last = lines[-3:]
    assert isinstance(garbage, LineMalformed) and garbage.raw == "garbage"
    assert isinstance(bad_utf8, LineMalformed) and bad_utf8.encoding == "base64"
    assert isinstance(last, LineIngested) and last.partial
    closed = sink.events[-1]
    assert isinstance(closed, IngestionClosed) and closed.files == {"stdout:oc.jsonl": len(seen)}
    assert fold_positions(sink.events).get("stdout", "oc.jsonl") == final


async def test_flushes_on_interval_without_more_lines() -> None:
    sink = Recorder()
    ingester = StreamIngester(sink, flush_interval=0.02)
    await ingester.on_line(b'{"type":"a"}\n', 0)
    await ingester.on_line(b'{"type":"b"}\n', 13)
    assert sink.calls == 0  # batched, not yet flushed
    await until(lambda: sink.calls == 1, what="timed flush")
    assert [len(b) for b in sink.batches] == [2]
    assert ingester.position.offset == 26
    await ingester.close(emit_closed=False)
    assert sink.calls == 1


async def test_flushes_when_the_batch_is_full() -> None:
    sink = Recorder()
    ingester = StreamIngester(sink, flush_interval=60, max_batch_events=3)
    offset = 0
    for i in range(7):
        line = b'{"type":"t","i":%d}\n' % i
        await ingester.on_line(line, offset)
        offset += len(line)
    assert [len(b) for b in sink.batches] == [3, 3]
    await ingester.close()
    assert [len(b) for b in sink.batches] == [3, 3, 2]  # the last line + IngestionClosed


async def test_restart_skips_recorded_lines() -> None:
    lines = [b'{"type":"t","i":%d}\n' % i for i in range(5)]
    offsets = [sum(len(x) for x in lines[:i]) for i in range(5)]
    first = Recorder()
    a = StreamIngester(first)
    for line, off in zip(lines[:3], offsets[:3], strict=True):
        await a.on_line(line, off)
    await a.flush()
    second = Recorder()
    b = StreamIngester(second, position=fold_positions(first.events).get("stdout", "oc.jsonl"))
    for line, off in zip(lines, offsets, strict=True):  # the runner replays from 0
        await b.on_line(line, off)
    await b.close()
    assert rebuild(first.events + second.events, "oc.jsonl") == b"".join(lines)


async def test_sink_error_is_raised_and_position_unadvanced() -> None:
    sink = Recorder(fail_on=2)
    ingester = StreamIngester(sink, flush_interval=0.01)
    await ingester.on_line(b'{"type":"a"}\n', 0)
    await until(lambda: sink.calls == 1, what="first flush")
    await ingester.on_line(b'{"type":"b"}\n', 13)
    await until(lambda: ingester.failure is not None, what="failed flush")
    assert ingester.position.offset == 13
    assert [e.offset for e in ingester.unflushed if isinstance(e, LineIngested)] == [13]
    with pytest.raises(RuntimeError, match="sink failed"):
        await ingester.on_line(b'{"type":"c"}\n', 26)
    with pytest.raises(RuntimeError, match="sink failed"):
        await ingester.close()
