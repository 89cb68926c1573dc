"""A time names the last event recorded at or before it: the SQL read and a scan agree,
a clock that stepped back included."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from arenad.home import Home, open_store
from arenad.readmodels.moments import event_at
from arenad.store.base import EventStore
from arenad.store.memory import InMemoryEventStore
from events.cell import CellSubmitted
from events.streams import cell_stream
from tests.events.samples import make_spec

# The writer's clock per append: it stepped back after the third.
TIMES = [1_000, 2_000, 3_000, 2_500, 4_000]


def _clock() -> Iterator[int]:
    return iter(TIMES)


async def _fill(store: EventStore) -> None:
    for i in range(len(TIMES)):
        spec = make_spec(instance_id=f"i{i}")
        await store.append(cell_stream(spec.cell_id), 0, [CellSubmitted(spec=spec)])


async def _answers(store: EventStore) -> list[int | None]:
    return [await event_at(store, t) for t in (999, 1_000, 2_499, 2_500, 3_999, 10_000)]


async def test_event_at(tmp_path: Path) -> None:
    expected = [None, 1, 2, 4, 4, 5]
    times = _clock()
    memory = InMemoryEventStore(clock=lambda: next(times))
    await _fill(memory)
    assert await _answers(memory) == expected
    times = _clock()
    async with open_store(Home(tmp_path), clock=lambda: next(times), create=True) as store:
        await _fill(store)
        assert await _answers(store) == expected
