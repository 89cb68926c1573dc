"""Live file ingestion: growing files (journals, an agent's stdout) into ``events.ingest`` events.

Knows nothing of SQL, cells or the ledger: it hands batches of events to an async
sink and resumes from positions folded out of the events the sink accepted.

- :mod:`~arenad.ingest.offsets` — pure fold: recorded events → where each file resumes.
- :mod:`~arenad.ingest.lines` — pure: bytes → line events (length, partial, kinds).
- :mod:`~arenad.ingest.tailer` — one file: bounded reads, truncation, snapshots.
- :mod:`~arenad.ingest.inotify` — inotify on the event loop (one descriptor, no thread).
- :mod:`~arenad.ingest.watcher` — run dirs: inotify + rescans, batching, close.
"""

from arenad.ingest.lines import LineSplitter, classify_line, parse_lines, split_lines
from arenad.ingest.offsets import (
    IngestPosition,
    Positions,
    advance,
    file_key,
    fold_positions,
    line_end,
)
from arenad.ingest.tailer import FileTailer, Mode
from arenad.ingest.watcher import (
    GlobSelection,
    RunDirWatcher,
    Sink,
    WatchSource,
    file_source,
    first_subdirectory,
)

__all__ = [
    "FileTailer",
    "GlobSelection",
    "IngestPosition",
    "LineSplitter",
    "Mode",
    "Positions",
    "RunDirWatcher",
    "Sink",
    "WatchSource",
    "advance",
    "classify_line",
    "file_key",
    "file_source",
    "first_subdirectory",
    "fold_positions",
    "line_end",
    "parse_lines",
    "split_lines",
]
