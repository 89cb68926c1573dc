"""arenad's errors, drawn once (a test keeps this tree complete and true):

    ArenadError
    ├── UserError                a mistake in what the user gave us (CLI exits 2, one line)
    │   ├── CampaignError        a campaign file that does not validate (names file and key)
    │   └── ScriptError          a scripted-model script that does not validate
    ├── StoreError               the event store cannot do what was asked
    │   ├── ConcurrencyError     a stream moved past the expected version (a lost race)
    │   ├── MigrationError       a migration changed after it was applied, or failed
    │   ├── LeaseError           another daemon holds this home
    │   ├── StoreUnwritable      disk full or read-only store: the daemon stops cleanly
    │   └── LogTampered          the chain fails its check before an append: nothing written
    ├── IllegalTransition        an event the cell state machine does not allow here
    ├── CellMovedOn              another writer moved the cell on (a runner stops)
    ├── ExecutorMismatch         a cell is pinned to another executor than the running one
    ├── DaemonFatal              the daemon cannot go on; it stopped, agents keep running
    ├── MaterializeError         a workspace could not be made (.stage names the step)
    ├── SandboxError             a cell's sandbox cannot be made (no bwrap, agent hidden)
    ├── ProvenanceError          an arm's provenance (what sits in its seat) is unknown
    ├── ProcError                a child process could not be started or ended as required
    │   ├── SpawnError           the child could not be started
    │   ├── GroupSurvivedError   a process group outlived SIGKILL
    │   └── CommandError         a short command failed (non-zero, timeout, spawn)
    ├── VerdictError             a judge verdict document that cannot be read
    ├── InvalidRolloutLine       a ledger line the tangle.rollout.v1 validator refuses
    └── LedgerWorkerFailed       a ledger worker process died or failed (nothing written)

Outside the tree: ``events.codec.UnknownEventError`` (a ValueError: the data contract
imports nothing of arenad), raised for a stored row this arenad cannot read.

Driver errors become these at the store boundary (sqlite3.IntegrityError on the
(stream, version) key -> ConcurrencyError), so callers never import sqlite3.
"""

from __future__ import annotations


class ArenadError(Exception):
    pass


class UserError(ArenadError):
    """A user mistake: the message says what and where; no traceback is shown."""


class CampaignError(UserError):
    pass


class StoreError(ArenadError):
    pass


class ConcurrencyError(StoreError):
    def __init__(self, stream: str, expected: int | None, actual: int | None) -> None:
        at = f"at version {actual}" if actual is not None else "moved on"
        super().__init__(
            f"stream {stream!r} is {at}, expected {expected} (a concurrent writer won)"
        )
        self.stream = stream
        self.expected = expected
        self.actual = actual


class MigrationError(StoreError):
    pass


class LeaseError(StoreError):
    pass


class StoreUnwritable(StoreError):
    pass


class LogTampered(StoreError):
    """The log fails its hash-chain check: appending on top of it would build on rows that
    were edited, deleted or inserted behind the log's back."""

    def __init__(self, path: object, first_bad_seq: int | None, problem: str) -> None:
        at = f" at row {first_bad_seq}" if first_bad_seq is not None else ""
        super().__init__(
            f"refusing to write to {path}: the log fails verification{at}: {problem}."
            " Nothing was written; `arenad verify-log` checks the whole chain"
        )
        self.first_bad_seq = first_bad_seq
        self.problem = problem


class IllegalTransition(ArenadError):
    def __init__(self, state: str | None, tag: str, stream: str = "") -> None:
        where = f" on {stream}" if stream else ""
        super().__init__(f"event {tag!r} is not allowed in state {state or 'new'}{where}")
        self.state = state
        self.tag = tag
