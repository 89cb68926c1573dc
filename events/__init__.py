"""arenad's data contract: every fact arenad records is one of these events.

This package depends on msgspec and the standard library only. It knows nothing of
cells' behaviour, SQL or files: it defines what an event *is* (``base``), the specs
events carry (``specs``), the event types (``cell``, ``ingest``, ``capture``,
``control``) and how they travel (``codec``: one encoder, one decoder, the upcast
chain).
"""

from events.base import Event, Recorded
from events.codec import EVENT_TYPES, decode_event, encode_event, event_tag, event_version

__all__ = [
    "EVENT_TYPES",
    "Event",
    "Recorded",
    "decode_event",
    "encode_event",
    "event_tag",
    "event_version",
]
