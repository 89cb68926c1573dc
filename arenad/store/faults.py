"""Fault injection for crash tests: die hard (or run out of disk) at a chosen commit.

``ARENAD_FAULT=<action>:<tag>[:<n>]`` arms one fault in a daemon, triggered by the n-th
(default: first) append that contains an event tagged ``<tag>``:

- ``crash-before``: the process exits with ``os._exit`` inside that append's transaction,
  just before COMMIT — nothing of the append is written (like a kill -9 at that instant).
- ``crash-after``: it exits right after the COMMIT — all of it is written, nothing after.
- ``full-after``: after the COMMIT the store's file stops growing (SQLite's
  ``max_page_count`` is pinned to its size), so the next appends fail as on a full disk.
- ``readonly-after``: after the COMMIT the store refuses writes (``query_only``), so the
  next appends fail as on a store remounted read-only.
- ``blob-limit-after``: after the COMMIT SQLite's length limit (``SQLITE_LIMIT_LENGTH``,
  1 GB by default) drops to :data:`FAULT_BLOB_LIMIT`, so an append holding a larger event
  fails with SQLite's own "string or blob too big", as a gigabyte capture would.

It is read once, at the edge (the daemon's start), and handed to the store; nothing else
reads the environment. An unset variable arms nothing; a malformed one, or a tag no event
type has (``events.codec.EVENT_TYPES``), is a user error (exit 2): it would never fire.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Literal, get_args

import msgspec

from arenad.errors import UserError
from events.codec import EVENT_TYPES, event_tag_of_type

ENV_VAR = "ARENAD_FAULT"
# The exit status of an injected crash (distinct from any status arenad exits with).
CRASH_EXIT = 86

Action = Literal["crash-before", "crash-after", "full-after", "readonly-after", "blob-limit-after"]
# The length limit ``blob-limit-after`` leaves (bytes of one row of the log).
FAULT_BLOB_LIMIT = 256 * 1024
_KNOWN_TAGS = frozenset(event_tag_of_type(t) for t in EVENT_TYPES)


class FaultPlan(msgspec.Struct, kw_only=True):
    action: Action
    tag: str
    nth: int = 1
    seen: int = 0

    def _hit(self, tags: Iterable[str]) -> bool:
        if self.tag not in tags:
            return False
        self.seen += 1
        return self.seen == self.nth

    def before_commit(self, tags: set[str]) -> None:
        if self.action == "crash-before" and self._hit(tags):
            _die(f"before committing {self.tag}")

    def after_commit(self, tags: set[str]) -> Action | None:
        """Crash now, or return the action the store must take on itself from now on
        (``full-after`` or ``readonly-after``); None when nothing fires."""
        if self.action == "crash-before" or not self._hit(tags):
            return None
        if self.action == "crash-after":
            _die(f"after committing {self.tag}")
        return self.action


def _die(when: str) -> None:
    sys.stderr.write(f"arenad: injected crash {when} ({ENV_VAR})\n")
    sys.stderr.flush()
    os._exit(CRASH_EXIT)


def parse_fault(spec: str) -> FaultPlan:
    parts = spec.split(":")
    if len(parts) not in (2, 3) or parts[0] not in get_args(Action) or not parts[1]:
        raise UserError(
            f"{ENV_VAR}={spec!r}: expected <action>:<event tag>[:<n>] with action one of"
            f" {', '.join(get_args(Action))}"
        )
    if parts[1] not in _KNOWN_TAGS:
        # A tag no event has would arm a fault that never fires: the crash test that set it
        # would pass without testing anything.
        raise UserError(
            f"{ENV_VAR}={spec!r}: no event is tagged {parts[1]!r} (the tags are those of"
            " events.codec.EVENT_TYPES, e.g. run.started, ingest.line)"
        )
    nth = 1
    if len(parts) == 3:
        if not parts[2].isdigit() or int(parts[2]) < 1:
            raise UserError(f"{ENV_VAR}={spec!r}: <n> must be a positive integer")
        nth = int(parts[2])
    action: Action = parts[0]  # type: ignore[assignment]
    return FaultPlan(action=action, tag=parts[1], nth=nth)


def fault_from_env(environ: dict[str, str] | None = None) -> FaultPlan | None:
    spec = (environ if environ is not None else os.environ).get(ENV_VAR, "").strip()
    return parse_fault(spec) if spec else None
