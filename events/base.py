"""The event base class and the stored envelope."""

from __future__ import annotations

from typing import ClassVar

import msgspec


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event.

    Subclasses give an explicit, stable ``tag=`` (never the class name: renaming a
    class must not orphan stored rows) and set ``VERSION`` when their shape changes;
    older rows are upcast (see ``events.codec``) before they are decoded.
    ``v`` travels inside the payload so a row is self-describing even outside its
    envelope.
    """

    VERSION: ClassVar[int] = 1
    v: int = 1


class Recorded(msgspec.Struct, frozen=True, gc=False):
    """An event as the log holds it: the envelope around the payload.

    ``recorded_at_ms`` comes from the clock the writer was given, at append time;
    folds and projections use it as *the* time of the fact and never read a clock
    themselves.

    ``gc=False``: a replay makes millions of these and they cannot form a cycle (an
    event never points back at its envelope), so the cycle collector need not track
    them. Positional construction (no ``kw_only``) is the replay's fast path.
    """

    seq: int
    stream: str
    version: int
    tag: str
    schema_version: int
    recorded_at_ms: int
    event: Event
