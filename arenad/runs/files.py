"""The run-file contract: what a run wrapper reads and writes in the cell's run dir.

The daemon (or the next one, after a restart) learns how a run ended from these files
alone: the wrapper's exit record (``arenad.exit.json``, written atomically by
``arenad/runs/wrapper.py``) and, next to an output file the wrapper had to cut, a
``<file>.capped`` marker holding the cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from arenad.runs import wrapper

EXIT_FILE = "arenad.exit.json"
WRAPPER_LOG = "arenad.wrapper.log"


class RunFiles(msgspec.Struct, frozen=True, kw_only=True):
    """Where one run's wrapper reads and writes (all in the cell's run dir)."""

    run_dir: str
    stdout: str
    stderr: str
    stdin: str | None = None
    # Bytes kept of each of stdout and stderr (None: no cap); the wrapper drops the rest.
    cap_bytes: int | None = None

    @property
    def exit_file(self) -> Path:
        return Path(self.run_dir) / EXIT_FILE


def capped_marker(path: str) -> str:
    """The file the wrapper makes next to an output file once it drops bytes of it."""
    return path + wrapper.CAPPED_SUFFIX


# The cause of a cut whose marker exists but is empty: the wrapper made it and could not
# write into it (a full disk), so "cap" would be a guess, and likely wrong.
UNKNOWN_CAUSE = "unknown (the wrapper could not write the cause; a full disk?)"


def capped_outputs(paths: Sequence[str]) -> list[tuple[str, str]]:
    """(path, cause) for each of a run's output files the wrapper cut: cause is "cap", or
    the write error that made the rest of the output undeliverable."""
    cut = []
    for path in paths:
        try:
            cause = Path(capped_marker(path)).read_text(errors="replace").strip()
        except OSError:
            continue
        cut.append((path, cause or UNKNOWN_CAUSE))
    return cut


class ExitRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the wrapper wrote when the agent ended (or could not start)."""

    started: bool
    wrapper_pid: int | None = None
    pid: int | None = None
    exit_status: int | None = None
    term_signal: int | None = None
    ended_at_ms: int | None = None
    error: str | None = None
    # Per output file the wrapper cut: the cause, and the bytes the file kept.
    capped: dict[str, str] | None = None
    kept: dict[str, int] | None = None
    # Set only in a record the wrapper sent the daemon because it could not write its file.
    exit_file_error: str | None = None
    # Set when the wrapper ended the run itself (``--deadline-s``, ``--lifeline``):
    # "deadline", or why its lifeline failed.
    ended_by: str | None = None
    # The limit the wrapper saw the run meet and ended it for: "memory", "pids", "disk".
    limit: str | None = None

    @property
    def code(self) -> int | None:
        """The exit code in the coreutils encoding (128 + N for death by signal N)."""
        if self.exit_status is not None:
            return self.exit_status
        if self.term_signal is not None:
            return 128 + self.term_signal
        return None


_exit_decoder = msgspec.json.Decoder(ExitRecord)


def decode_exit_record(data: bytes) -> ExitRecord | None:
    """An exit record the wrapper sent through its socket (one JSON line); None if garbled."""
    try:
        return _exit_decoder.decode(data)
    except msgspec.DecodeError:
        return None


def read_exit_record(path: Path, wrapper_pid: int | None = None) -> ExitRecord | None:
    """The exit record of wrapper ``wrapper_pid`` (any wrapper's if None); None when there
    is none, it cannot be read, or another wrapper wrote it (a crashed daemon's leftover in
    a re-materialized run dir)."""
    try:
        record = _exit_decoder.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    if wrapper_pid is not None and record.wrapper_pid != wrapper_pid:
        return None
    return record
