"""The event store: append-only streams with optimistic concurrency.

It knows nothing of cells. Read models plug in as ``Projector`` objects that run
inside the append's transaction.
"""

from arenad.store.base import AppendRequest, EventStore
from arenad.store.memory import InMemoryEventStore
from arenad.store.sqlite import Projector, SqliteEventStore

__all__ = ["AppendRequest", "EventStore", "InMemoryEventStore", "Projector", "SqliteEventStore"]
