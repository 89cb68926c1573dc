"""Capture proposer shot receipts and their worktrees' Claude Code transcripts as events.

What is captured (paths: ``arenad.proposer.layout``):

- every ``[<author>/]gen<G>-cand<C>-shot<S>.json`` under the shots dir, as a
  ``ProposerShotCaptured`` with the worktree it names. A receipt that is not UTF-8, not
  JSON or not ``{receipt: {...}}`` is captured all the same, with ``error`` saying why; a
  file that cannot be read at all is captured with ``content: null`` and the error.
- every ``*.jsonl`` directly under ``<claude projects dir>/<slug(cwd)>/`` for each
  worktree cwd: the receipts' worktrees plus every directory under the worktree root (a
  transcript grows while its shot runs, before its receipt exists), as a
  ``ClaudeTranscriptCaptured``.

Exactly once, and bounded. Each file has its own stream; an event is appended only when
the file's sha256 differs from the one its stream's latest event recorded, with the
stream's version as the expected version. So a restart (which re-reads the heads from the
log) captures nothing twice, and two capturers racing on one file cannot both append: the
loser gets a ConcurrencyError, re-reads the head and finds the content already there. A
file whose size and mtime have not changed since its content was checked is not re-read.

Live capture waits for a file to settle (unchanged for ``settle_s``) before reading it,
and re-captures a transcript at most every ``transcript_min_interval_s``: a transcript that
grows for an hour costs at most ``1 + 3600 / interval`` snapshots, never one per write.
The final content is always captured: a file left alone settles at the next rescan after
``max(settle_s, interval)``, and stopping the watcher (or ``scan_once``) captures every
changed file at once, settled or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
from watchdog.events import (
    DirCreatedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver

from arenad.errors import ConcurrencyError
from arenad.ingest.live import LiveLoop
from arenad.ingest.watcher import start_observer, stop_observer
from arenad.proposer.layout import (
    SHOT_PREFIX,
    TRANSCRIPT_PREFIX,
    ShotName,
    claude_project_slug,
    parse_shot_path,
    shot_stream,
    transcript_stream,
    worktree_cwd,
)
from arenad.store.base import AppendRequest, EventStore
from events.base import Event
from events.capture import ClaudeTranscriptCaptured, ProposerShotCaptured

__all__ = [
    "CaptureCounts",
    "CapturePolicy",
    "ProposerCapture",
    "ProposerPaths",
    "ProposerShotWatcher",
    "run_proposer_capture",
    "scan_once",
]

log = logging.getLogger(__name__)

Clock = Callable[[], float]

_RACE_RETRIES = 3


class ProposerPaths(msgspec.Struct, frozen=True, kw_only=True):
    """The three places proposer capture reads (absolute, symlinks resolved: Claude Code
    names a project after its real cwd)."""

    shots_dir: str
    worktree_root: str
    claude_projects_dir: str

    @classmethod
    def for_home(
        cls,
        home_root: str | os.PathLike[str],
        *,
        worktree_root: str | os.PathLike[str] | None = None,
        claude_projects_dir: str | os.PathLike[str] | None = None,
    ) -> ProposerPaths:
        home = Path(home_root)
        return cls(
            shots_dir=os.path.realpath(home / "proposer-shots"),
            worktree_root=os.path.realpath(
                worktree_root if worktree_root is not None else home / "proposer-wt"
            ),
            claude_projects_dir=os.path.realpath(
                Path(claude_projects_dir).expanduser()
                if claude_projects_dir is not None
                else Path("~/.claude/projects").expanduser()
            ),
        )


class CapturePolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How eagerly live capture snapshots files (``scan_once`` and a stop ignore both)."""

    # A file must keep the same size and mtime this long before it is read.
    settle_s: float = 2.0
    # A transcript already captured is captured again at most this often.
    transcript_min_interval_s: float = 60.0
    # Events per transaction are cut at about this many content bytes.
    max_batch_bytes: int = 32 << 20


class CaptureCounts(msgspec.Struct, kw_only=True):
    """Events appended (receipts and transcripts), over a scan or a watcher's life."""

    receipts: int = 0
    transcripts: int = 0

    def add(self, other: CaptureCounts) -> None:
        self.receipts += other.receipts
        self.transcripts += other.transcripts


# --------------------------------------------------------------------------- listing


@dataclass(frozen=True)
class _File:
    stream: str
    path: str
    size: int
    mtime_ns: int
    # A receipt: its name; a transcript: (cwd, session id).
    shot: ShotName | None = None
    cwd: str = ""
    session_id: str = ""

    @property
    def stat_key(self) -> tuple[int, int]:
        return (self.size, self.mtime_ns)


def _regular(path: str) -> os.stat_result | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st if os.path.isfile(path) else None


def _entries(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return []


def _receipt_files(shots_dir: str) -> list[_File]:
    """Receipts flat under the shots dir or one level down (an author's dir)."""
    found: list[_File] = []

    def add(rel: str, path: str) -> None:
        name = parse_shot_path(rel)
        st = _regular(path) if name is not None else None
        if name is not None and st is not None:
            found.append(_File(shot_stream(rel), path, st.st_size, st.st_mtime_ns, shot=name))

    for entry in _entries(shots_dir):
        if entry.is_dir(follow_symlinks=False):
            for inner in _entries(entry.path):
                add(f"{entry.name}/{inner.name}", inner.path)
        else:
            add(entry.name, entry.path)
    return found


def _worktree_cwds(paths: ProposerPaths, receipts: Sequence[_File]) -> list[str]:
    cwds = {worktree_cwd(paths.worktree_root, f.shot) for f in receipts if f.shot is not None}
    cwds.update(e.path for e in _entries(paths.worktree_root) if e.is_dir(follow_symlinks=False))
    return sorted(cwds)


def _transcript_files(projects_dir: str, cwds: Sequence[str]) -> list[_File]:
    """``*.jsonl`` directly in each cwd's project dir (not subagent threads below it)."""
    found: list[_File] = []
    slugs: set[str] = set()
    for cwd in cwds:
        slug = claude_project_slug(cwd)
        if slug in slugs:  # two cwds Claude Code files under one project dir
            continue
        slugs.add(slug)
        for entry in _entries(os.path.join(projects_dir, slug)):
            if not entry.name.endswith(".jsonl"):
                continue
            st = _regular(entry.path)
            if st is None:
                continue
            found.append(
                _File(
                    transcript_stream(slug, entry.name),
                    entry.path,
                    st.st_size,
                    st.st_mtime_ns,
                    cwd=cwd,
                    session_id=entry.name[: -len(".jsonl")],
                )
            )
    return found


def list_files(paths: ProposerPaths) -> tuple[list[_File], list[str]]:
    """Every receipt and transcript file there is now, and the worktree cwds whose
    transcripts were looked for (blocking: run it in a thread)."""
    receipts = _receipt_files(paths.shots_dir)
    cwds = _worktree_cwds(paths, receipts)
    return receipts + _transcript_files(paths.claude_projects_dir, cwds), cwds


# --------------------------------------------------------------------------- events


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _receipt_error(text: str) -> str | None:
    """Why ``text`` is not a shot receipt file, or None when it is one."""
    try:
        doc = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        return f"not JSON: {exc}"
    if not isinstance(doc, dict) or not isinstance(doc.get("receipt"), dict):
        return "not a shot receipt: no receipt object"
    return None


def _receipt_event(f: _File, data: bytes | None, read_error: str | None, root: str) -> Event:
    assert f.shot is not None
    content: str | None = None
    error = read_error
    if data is not None:
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            error = f"not UTF-8: {exc}"
        else:
            error = _receipt_error(content)
    return ProposerShotCaptured(
        path=f.path,
        author=f.shot.author,
        generation=f.shot.generation,
        candidate_index=f.shot.candidate_index,
        shot=f.shot.shot,
        content=content,
        error=error,
        sha256=hashlib.sha256(data).hexdigest() if data is not None else None,
        size=len(data) if data is not None else None,
        worktree=worktree_cwd(root, f.shot),
    )


def _transcript_event(f: _File, data: bytes) -> Event:
    return ClaudeTranscriptCaptured(
        cwd=f.cwd,
        path=f.path,
        session_id=f.session_id,
        # As Node's readFile(path, 'utf8') reads it: bad bytes become U+FFFD.
        content=data.decode("utf-8", errors="replace"),
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
    )


def _read(path: str) -> tuple[bytes | None, str | None, bool]:
    """(bytes, error, gone): a vanished file is gone, any other failure an error."""
    try:
        with open(path, "rb") as fh:
            return fh.read(), None, False
    except FileNotFoundError:
        return None, None, True
    except OSError as exc:
        return None, f"cannot read: {exc.strerror or exc}", False


# --------------------------------------------------------------------------- the state


@dataclass
class _Head:
    """What a stream's latest event recorded."""

    version: int = 0
    sha256: str | None = None
    error: str | None = None
    # Clock time of our last append to it (-inf: none by this process).
    captured_at: float = -math.inf

    def holds(self, event: Event) -> bool:
        if isinstance(event, ProposerShotCaptured):
            return (event.sha256, event.error) == (self.sha256, self.error) and self.version > 0
        assert isinstance(event, ClaudeTranscriptCaptured)
        return event.sha256 == self.sha256 and self.version > 0


@dataclass
class _Seen:
    stat_key: tuple[int, int]
    since: float
    # This stat's content was compared with the log (captured, or already there).
    settled: bool = False


def _head_of(version: int, event: Event) -> _Head:
    if isinstance(event, ProposerShotCaptured):
        sha = event.sha256
        if sha is None and event.content is not None:  # rows from before the field
            sha = hashlib.sha256(event.content.encode("utf-8")).hexdigest()
        return _Head(version=version, sha256=sha, error=event.error)
    if isinstance(event, ClaudeTranscriptCaptured):
        sha = event.sha256 or hashlib.sha256(event.content.encode("utf-8")).hexdigest()
        return _Head(version=version, sha256=sha)
    return _Head(version=version)


@dataclass
class ProposerCapture:
    """Which files changed since the log last recorded them; appends their captures.

    ``load`` reads each proposer stream's head from the log; ``scan`` lists the files,
    reads the ones due and appends what changed. One instance per capturer; the log, not
    this object, is the memory across restarts.
    """

    store: EventStore
    paths: ProposerPaths
    policy: CapturePolicy = field(default_factory=CapturePolicy)
    clock: Clock = time.monotonic
    # The worktree cwds the last scan looked at (the live watcher watches their dirs).
    cwds: list[str] = field(default_factory=list)
    _heads: dict[str, _Head] = field(default_factory=dict)
    _seen: dict[str, _Seen] = field(default_factory=dict)

    async def load(self, streams: Sequence[str] | None = None) -> None:
        """Read the heads of ``streams`` (default: every proposer stream) from the log."""
        names = (
            list(streams)
            if streams is not None
            else [
                *await self.store.streams(SHOT_PREFIX),
                *await self.store.streams(TRANSCRIPT_PREFIX),
            ]
        )
        for stream in names:
            version = await self.store.stream_version(stream)
            self._seen.pop(stream, None)
            if version == 0:
                self._heads.pop(stream, None)
                continue
            last = await self.store.read_stream(stream, version - 1)
            self._heads[stream] = _head_of(version, last[-1].event)

    def _due(self, f: _File, now: float, flush: bool) -> bool:
        """Whether ``f`` must be read now (its content may differ from the log's)."""
        seen = self._seen.get(f.stream)
        if seen is None or seen.stat_key != f.stat_key:
            self._seen[f.stream] = seen = _Seen(f.stat_key, since=now)
            return flush or self.policy.settle_s <= 0
        if seen.settled:
            return False
        if flush:
            return True
        if now - seen.since < self.policy.settle_s:
            return False
        if f.shot is None:
            head = self._heads.get(f.stream)
            interval = self.policy.transcript_min_interval_s
            if head is not None and now - head.captured_at < interval:
                return False
        return True

    def _prepare(self, due: Sequence[_File]) -> list[tuple[_File, Event | None]]:
        """Read each due file (blocking): its event, or None when the log already has it."""
        out: list[tuple[_File, Event | None]] = []
        for f in due:
            data, error, gone = _read(f.path)
            if gone:
                continue
            if f.shot is not None:
                event = _receipt_event(f, data, error, self.paths.worktree_root)
            elif data is None:
                log.warning("proposer capture: %s: %s (retrying)", f.path, error)
                continue
            else:
                event = _transcript_event(f, data)
            head = self._heads.get(f.stream)
            out.append((f, None if head is not None and head.holds(event) else event))
        return out

    async def scan(self, *, flush: bool = False) -> CaptureCounts:
        """One pass: list, read what is due, append what changed. ``flush`` ignores the
        settle and interval rules (a one-shot scan, a stop)."""
        counts = CaptureCounts()
        for _ in range(_RACE_RETRIES):
            files, self.cwds = await asyncio.to_thread(list_files, self.paths)
            present = {f.stream for f in files}
            for stream in [s for s in self._seen if s not in present]:
                del self._seen[stream]
            now = self.clock()
            due = [f for f in files if self._due(f, now, flush)]
            if not due:
                break
            prepared = await asyncio.to_thread(self._prepare, due)
            raced = await self._append(prepared, now, counts)
            if not raced:
                break
            await self.load(raced)
        return counts

    async def _append(
        self, prepared: Sequence[tuple[_File, Event | None]], now: float, counts: CaptureCounts
    ) -> list[str]:
        """Append the changed files in bounded transactions; the streams that raced."""
        raced: list[str] = []
        batch: list[tuple[_File, Event]] = []
        size = 0
        for f, event in prepared:
            if event is None:
                self._seen[f.stream].settled = True
                continue
            batch.append((f, event))
            size += f.size
            if size >= self.policy.max_batch_bytes:
                raced += await self._commit(batch, now, counts)
                batch, size = [], 0
        if batch:
            raced += await self._commit(batch, now, counts)
        return raced

    async def _commit(
        self, batch: Sequence[tuple[_File, Event]], now: float, counts: CaptureCounts
    ) -> list[str]:
        requests = [
            AppendRequest(f.stream, self._heads.get(f.stream, _Head()).version, [event])
            for f, event in batch
        ]
        try:
            await self.store.append_many(requests)
        except ConcurrencyError:
            # Another capturer appended first: re-read those heads and decide again.
            return [f.stream for f, _ in batch]
        for f, event in batch:
            head = _head_of(self._heads.get(f.stream, _Head()).version + 1, event)
            head.captured_at = now
            self._heads[f.stream] = head
            self._seen[f.stream].settled = True
            if isinstance(event, ProposerShotCaptured):
                counts.receipts += 1
            else:
                counts.transcripts += 1
        return []


async def scan_once(
    store: EventStore, paths: ProposerPaths, *, clock: Clock = time.monotonic
) -> CaptureCounts:
    """Capture every receipt and transcript that differs from the log, now."""
    capture = ProposerCapture(store, paths, clock=clock)
    await capture.load()
    return await capture.scan(flush=True)


# --------------------------------------------------------------------------- live


_WATCHED_EVENTS: list[type[FileSystemEvent]] = [
    FileModifiedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileMovedEvent,
    FileDeletedEvent,
    DirCreatedEvent,
    DirMovedEvent,
]
"""No open/close-nowrite events: the capture's own reads must not wake it."""


class _Waker(FileSystemEventHandler):
    """Runs on watchdog's thread: only pokes the loop."""

    def __init__(self, notify: Callable[[], None]) -> None:
        self._notify = notify

    def on_any_event(self, event: FileSystemEvent) -> None:
        self._notify()


class ProposerShotWatcher(LiveLoop):
    """Live capture: wakes on watchdog notifications and on a periodic rescan (so a
    missed notification delays a capture by one interval at most, never loses it).

    ``start()`` returns at once; ``close()`` stops, captures every changed file one last
    time and returns the counts; ``wait()`` returns when it stopped and re-raises the error
    that stopped it (a store that refuses appends), as ``close()`` does.
    """

    task_name = "arenad-proposer-capture"

    def __init__(
        self,
        store: EventStore,
        paths: ProposerPaths,
        *,
        policy: CapturePolicy | None = None,
        rescan_interval: float = 1.0,
        inotify: bool = True,
        clock: Clock = time.monotonic,
    ) -> None:
        super().__init__()
        if rescan_interval <= 0:
            raise ValueError("rescan_interval must be positive")
        self.paths = paths
        self.counts = CaptureCounts()
        self._capture = ProposerCapture(store, paths, policy or CapturePolicy(), clock)
        self._rescan_interval = rescan_interval
        self._use_inotify = inotify
        self._observer: BaseObserver | None = None
        self._handler = _Waker(self._poke)
        self._watched: set[str] = set()

    async def close(self) -> CaptureCounts:  # type: ignore[override]  # and the counts
        """Stop, then capture every file that differs from the log (settled or not)."""
        await super().close()
        return self.counts

    async def _on_start(self) -> None:
        await self._capture.load()
        if self._use_inotify:
            self._observer = start_observer("proposer capture")

    async def _final_pass(self) -> None:
        self.counts.add(await self._capture.scan(flush=True))

    async def _run(self) -> None:
        while not self._closing:
            self._wake.clear()
            self.counts.add(await self._capture.scan())
            await self._watch_dirs()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._rescan_interval):
                    await self._wake.wait()

    async def _watch_dirs(self) -> None:
        observer = self._observer
        if observer is None:
            return
        paths = self.paths
        # The shots dir with its author dirs; the roots, to see new worktrees and projects;
        # each worktree's project dir, where its transcripts grow.
        wanted = [
            (paths.shots_dir, True),
            (paths.worktree_root, False),
            (paths.claude_projects_dir, False),
        ]
        projects = paths.claude_projects_dir
        wanted += [
            (os.path.join(projects, claude_project_slug(c)), False) for c in self._capture.cwds
        ]
        for directory, recursive in wanted:
            if directory in self._watched or not os.path.isdir(directory):
                continue
            try:
                await asyncio.to_thread(
                    observer.schedule,
                    self._handler,
                    directory,
                    recursive=recursive,
                    event_filter=_WATCHED_EVENTS,
                )
            except OSError as exc:  # gone again, or out of watches: rescans still work
                log.warning("cannot watch %s, relying on rescans: %s", directory, exc)
                continue
            self._watched.add(directory)

    async def _stop_watching(self) -> None:
        observer, self._observer = self._observer, None
        if observer is not None:
            await asyncio.to_thread(stop_observer, observer)


async def run_proposer_capture(
    store: EventStore,
    paths: ProposerPaths,
    stop: asyncio.Event,
    *,
    policy: CapturePolicy | None = None,
    rescan_interval: float = 1.0,
) -> CaptureCounts:
    """Capture live until ``stop`` is set, then capture every change once more and return.

    Raises what stopped the capture early (the store refusing appends). Cancelling the
    task stops at once without the last pass; the next start catches up from the log.
    """
    watcher = ProposerShotWatcher(store, paths, policy=policy, rescan_interval=rescan_interval)
    await watcher.start()
    try:
        stopped = asyncio.create_task(stop.wait())
        running = asyncio.create_task(watcher.wait())
        try:
            await asyncio.wait({stopped, running}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (stopped, running):
                task.cancel()
            await asyncio.gather(stopped, running, return_exceptions=True)
    except BaseException:
        await watcher.abort()
        raise
    return await watcher.close()
