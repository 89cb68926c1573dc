"""Prepared checkouts: one real clone per (source, base), copied for every cell that needs it.

A git workspace is ``git clone --no-checkout`` + ``checkout -B hh-work <base>`` + a status
check: three git processes (the clone starts two more, ``sh`` and ``git-upload-pack``)
and ~50 new files and dirs. Arms and reps of one instance share the same source and base,
so the daemon does that once per (source, base), in a template dir it owns, and gives each
cell a copy made in-process. The template's objects are repacked once into one pack, so a
cell's copy of them is a few files; they are real copies: a hard link would let one cell's
agent rewrite (chmod, then write in place) the base of every other cell and of the template.

The copy is restamped: its index gets the stat data of the copied files (the template was
clean, so their content is the entries'), exactly what ``git update-index --refresh``
would leave, so ``git diff-files`` is empty and ``git apply --index``/``--3way`` work as in
a fresh clone. With a git root the copy is also sealed (:mod:`arenad.materialize.seal`): the
root's repo links the template's objects (the sandbox hides both from the agent).

What a copy differs in from a fresh clone: file times and inode numbers, no
``.git/hooks/*.sample`` files (inert examples git writes into every clone; dropping them
halves the files a cell's copy makes), one pack of the objects reachable from the clone's
refs, and the clone's moment: its ``origin/*`` refs and reflog times are those of the
template's clone, made by this daemon. The base commit, the work tree, the index entries
and the branch are the same bytes. Templates live under ``<root>``, which the daemon empties
when it starts and stops; at most ``keep`` are kept (least recently used first out).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import stat
from collections import OrderedDict
from pathlib import Path

import msgspec

from arenad.materialize import gitindex
from arenad.materialize.git import materialize_git
from arenad.materialize.seal import Seal, seal_workspace
from arenad.materialize.workspace import (
    GIT_TIMEOUT_S,
    MaterializeError,
    MaterializeResult,
    base_tree_of,
    git_step,
    prepare_dest,
)


class _Template(msgspec.Struct, frozen=True, kw_only=True):
    result: MaterializeResult
    base_tree: str


class WorkspaceTemplates:
    def __init__(self, root: Path, *, keep: int = 16) -> None:
        self.root = root
        self.keep = keep
        self._ready: OrderedDict[str, asyncio.Future[_Template]] = OrderedDict()
        self._busy: dict[str, int] = {}
        self._serial = 0

    def clear(self) -> None:
        """Remove every template (blocking: call from a thread, at start and stop)."""
        self._ready.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    async def materialize(
        self,
        source: str,
        base: str,
        dest: Path,
        *,
        git_root: Path | None = None,
        timeout_s: float = GIT_TIMEOUT_S,
    ) -> MaterializeResult:
        """What ``materialize_git(source, base, dest)`` gives, from the (source, base)
        template, sealed at ``git_root`` when given; the template is made on first use (a
        failure is raised, not kept)."""
        key = hashlib.sha256(f"{os.path.abspath(source)}\0{base}".encode()).hexdigest()[:24]
        # Busy from the start: a template in use (or awaited) is never evicted.
        self._busy[key] = self._busy.get(key, 0) + 1
        try:
            template = await self._template(key, source, base, timeout_s)
            made = Path(template.result.workspace)
            objects = made / ".git" / "objects"
            try:
                # One trip to a thread: the copy, its index restamped, its seal.
                index, seal = await asyncio.to_thread(
                    _copy_and_seal, made, dest, template, base, git_root
                )
            except OSError as exc:
                raise MaterializeError("cp-fail", f"{type(exc).__name__}: {exc}") from exc
            if index is None:
                # Not restamped in-process (an index gitindex does not rewrite): git's own
                # refresh, before any agent has the workspace, then the seal.
                await git_step(
                    "cp-fail", dest, ["update-index", "-q", "--refresh"], timeout_s=timeout_s
                )
                if git_root is not None:
                    try:
                        seal = await asyncio.to_thread(
                            seal_workspace,
                            dest,
                            git_root,
                            base,
                            template.base_tree,
                            objects=objects,
                            link_objects=True,
                        )
                    except OSError as exc:
                        raise MaterializeError("seal-fail", f"{type(exc).__name__}: {exc}") from exc
        finally:
            self._busy[key] -= 1
            if not self._busy[key]:
                del self._busy[key]
        return msgspec.structs.replace(template.result, workspace=os.fspath(dest), seal=seal)

    async def _template(self, key: str, source: str, base: str, timeout_s: float) -> _Template:
        pending = self._ready.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._ready[key] = pending
            try:
                pending.set_result(await self._build(key, source, base, timeout_s))
            except BaseException as exc:
                if self._ready.get(key) is pending:
                    del self._ready[key]
                if isinstance(exc, asyncio.CancelledError):
                    pending.cancel()
                else:
                    pending.set_exception(exc)
                    pending.exception()  # retrieved: a failure nobody awaited is not logged
                raise
            await self._evict()
        else:
            self._ready.move_to_end(key)
        return await asyncio.shield(pending)

    async def _build(self, key: str, source: str, base: str, timeout_s: float) -> _Template:
        self._serial += 1
        partial = self.root / f"{key}.partial-{self._serial}"
        final = self.root / key
        try:
            result = await materialize_git(source, base, partial, timeout_s=timeout_s)
            await asyncio.to_thread(_drop_sample_hooks, partial)
            # One pack of what the clone's refs reach (-n: no server info), then no loose
            # object left: each cell copies a few files, whatever the source's layout.
            await git_step("clone-fail", partial, ["repack", "-a", "-d", "-q", "-n"])
            await git_step("clone-fail", partial, ["prune", "--expire=now"])
            # -a packed what alternates lent too: the template stands alone.
            (partial / ".git" / "objects" / "info" / "alternates").unlink(missing_ok=True)
            base_tree = await base_tree_of(partial, base)
            await asyncio.to_thread(_replace_dir, partial, final)
        finally:
            await asyncio.to_thread(shutil.rmtree, partial, True)
        return _Template(
            result=msgspec.structs.replace(result, workspace=os.fspath(final)),
            base_tree=base_tree,
        )

    async def _evict(self) -> None:
        while len(self._ready) > self.keep:
            victim = next((k for k in self._ready if k not in self._busy), None)
            if victim is None:
                return
            done = self._ready.pop(victim)
            if done.done() and not done.exception():
                await asyncio.to_thread(shutil.rmtree, done.result().result.workspace, True)


def _replace_dir(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    os.replace(src, dst)


def _drop_sample_hooks(workspace: Path) -> None:
    # git's inert examples (``*.sample`` never runs): a third of a workspace's files, and
    # the copy's cost per cell goes with the number of files.
    for sample in (workspace / ".git" / "hooks").glob("*.sample"):
        sample.unlink()


def _copy_and_seal(
    made: Path, dest: Path, template: _Template, base: str, git_root: Path | None
) -> tuple[bytes | None, Seal | None]:
    """The copy (its restamped index's bytes, None if not restamped) and, with a git
    root and a restamped index, its seal."""
    index = _copy_workspace(made, dest, restamp=template.result.clean)
    if index is None or git_root is None:
        return index, None
    seal = seal_workspace(
        dest,
        git_root,
        base,
        template.base_tree,
        objects=made / ".git" / "objects",
        link_objects=True,
        index=index,
    )
    return index, seal


def _copy_workspace(template: Path, dest: Path, *, restamp: bool) -> bytes | None:
    """Copy ``template`` to ``dest`` (replacing it), every file with its mode and times;
    with ``restamp``, give the copy's index the copied files' stat data and return its
    bytes (None: the index is one :mod:`gitindex` does not rewrite, or not asked)."""
    prepare_dest(dest)
    _copy_dir(os.fspath(template), os.fspath(dest))
    if not restamp:
        return None
    try:
        return gitindex.restamp(dest / ".git" / "index", dest)
    except gitindex.IndexFormatError:
        return None


# Plain os calls rather than shutil.copy2: this runs for every file of every cell, holding
# the GIL between calls, and copy2's generality (xattrs, flags, symlink follow-ups) more
# than doubled the time. Template files are git's, made here: no xattrs to carry.
def _copy_dir(src: str, dst: str) -> None:
    os.mkdir(dst)
    with os.scandir(src) as entries:
        for entry in entries:
            target = os.path.join(dst, entry.name)
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir(follow_symlinks=False):
                _copy_dir(entry.path, target)
            else:
                _copy_file(entry.path, target, entry.stat(follow_symlinks=False))
    _copy_mode_and_times(os.stat(src), dst)


def _copy_file(src: str, dst: str, st: os.stat_result) -> None:
    source = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        copy = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            remaining = st.st_size
            while remaining > 0:
                sent = os.sendfile(copy, source, None, remaining)
                if sent == 0:
                    raise OSError(f"{src} shrank while it was copied")
                remaining -= sent
            _copy_mode_and_times(st, copy)
        finally:
            os.close(copy)
    finally:
        os.close(source)


def _copy_mode_and_times(st: os.stat_result, target: str | int) -> None:
    os.chmod(target, stat.S_IMODE(st.st_mode))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
