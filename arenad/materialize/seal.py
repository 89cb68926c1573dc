"""A workspace's seal: what the daemon keeps of a workspace it made, before any agent ran.

The agent owns ``ws/.git``; the daemon never reads it again after materialization. Instead
each cell has a *git root* the daemon owns, outside the run dir (so the sandbox hides it)::

    <root>/repo/        a git dir holding the base commit's objects; HEAD = base (detached);
                        a config the daemon writes; no hooks
    <root>/base.index   the workspace's index at materialization: base's entries with the
                        stat data of the files as the daemon left them
    <root>/work.index   the patch step's private index (a fresh copy of base.index each time)

and records (in CellMaterialized) the base commit's tree and the identity of ``ws`` and
``ws/.git``: (device, inode, inode generation). ext4 gives a freed inode number to the next
file at once, so ``rm -rf .git && git init`` keeps (device, inode); the generation
(``FS_IOC_GETVERSION``) tells them apart. Where the filesystem has none (tmpfs), the pair
alone is kept, written ``dev:ino:-``.

The repo's objects must be files no agent can write: for a template's copy they are hard
links to the template's (which the sandbox hides, and which no cell's workspace shares);
for any other workspace they are copies of its objects, taken before the agent ran.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import struct
from pathlib import Path

import msgspec

from arenad.materialize import gitsafe

FS_IOC_GETVERSION = 0x80087601
REPO = "repo"
BASE_INDEX = "base.index"
WORK_INDEX = "work.index"
# The only config the daemon's git reads (with gitsafe's -c overrides on top).
REPO_CONFIG = b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"


class Seal(msgspec.Struct, frozen=True, kw_only=True):
    root: str
    workspace: str
    base: str
    base_tree: str
    # None: not recorded (a workspace sealed after the fact; nothing to compare).
    ws_identity: str | None = None
    dotgit_identity: str | None = None

    @property
    def git_dir(self) -> str:
        return os.path.join(self.root, REPO)

    @property
    def base_index(self) -> str:
        return os.path.join(self.root, BASE_INDEX)

    @property
    def work_index(self) -> str:
        return os.path.join(self.root, WORK_INDEX)


def identity(path: str | os.PathLike[str]) -> str:
    """``dev:ino:generation`` of the directory at ``path`` (not following a symlink);
    raises OSError when it is not a directory."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        try:
            raw = fcntl.ioctl(fd, FS_IOC_GETVERSION, b"\0" * 8)
            generation = str(struct.unpack_from("=I", raw)[0])
        except OSError:
            generation = "-"  # no inode generations here (tmpfs, overlayfs, ...)
        return f"{st.st_dev}:{st.st_ino}:{generation}"
    finally:
        os.close(fd)


def _identity_or_why(path: str) -> str:
    try:
        return identity(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return "missing"
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            return "not a directory"
        return exc.strerror or str(exc)


def prepare_root(root: str | os.PathLike[str]) -> Path:
    """An empty git root at ``root`` (replacing any previous one) with its repo's skeleton."""
    r = Path(root)
    if r.is_symlink() or r.is_file():
        r.unlink()
    elif r.exists():
        shutil.rmtree(r)
    repo = r / REPO
    for sub in ("refs/heads", "refs/tags", "objects"):
        (repo / sub).mkdir(parents=True)
    return r


def write_repo_files(root: str | os.PathLike[str], base: str) -> None:
    """HEAD (detached at ``base``) and the config; rewritten before every use, so nothing
    that changed them in between counts."""
    repo = os.path.join(root, REPO)
    _write(os.path.join(repo, "HEAD"), base.encode() + b"\n")
    _write(os.path.join(repo, "config"), REPO_CONFIG)


def _write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def fill_objects(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, link: bool) -> None:
    """Put the object store at ``src`` under ``dst`` (an existing dir): hard links when
    ``link`` (a copy where a link is refused), else copies. Regular files and directories
    only: a symlink, FIFO or socket in an object store is nobody's object."""
    with os.scandir(src) as entries:
        for entry in entries:
            target = os.path.join(dst, entry.name)
            if entry.is_dir(follow_symlinks=False):
                os.mkdir(target)
                fill_objects(entry.path, target, link=link)
            elif entry.is_file(follow_symlinks=False):
                if link:
                    try:
                        os.link(entry.path, target, follow_symlinks=False)
                        continue
                    except OSError:
                        pass
                copy_file(entry.path, target)


def copy_file(src: str, dst: str) -> None:
    """A regular file's bytes and mode, never following a symlink or blocking on a FIFO."""
    source = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(source)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{src} is not a regular file")
        copy = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            remaining = st.st_size
            while remaining > 0:
                sent = os.sendfile(copy, source, None, remaining)
                if sent == 0:
                    raise OSError(f"{src} shrank while it was copied")
                remaining -= sent
            os.fchmod(copy, stat.S_IMODE(st.st_mode))
        finally:
            os.close(copy)
    finally:
        os.close(source)


def seal_workspace(
    ws: str | os.PathLike[str],
    root: str | os.PathLike[str],
    base: str,
    base_tree: str,
    *,
    objects: str | os.PathLike[str],
    link_objects: bool,
    index: bytes | None = None,
) -> Seal:
    """Seal the freshly made ``ws`` (blocking): the git root at ``root`` with ``objects``
    (the template's, linked; or the workspace's own, copied), the base index (``index``,
    else a copy of the workspace's), and the identities of ``ws`` and ``ws/.git``."""
    w = os.fspath(ws)
    r = prepare_root(root)
    write_repo_files(r, base)
    fill_objects(objects, r / REPO / "objects", link=link_objects)
    if index is None:
        with open(os.path.join(w, ".git", "index"), "rb") as f:
            index = f.read()
    _write(os.fspath(r / BASE_INDEX), index)
    return Seal(
        root=os.fspath(r),
        workspace=w,
        base=base,
        base_tree=base_tree,
        ws_identity=identity(w),
        dotgit_identity=identity(os.path.join(w, ".git")),
    )


async def tree_of(root: str | os.PathLike[str], commit: str) -> str:
    """``<commit>^{tree}`` read from the git root's own repo."""
    r = os.fspath(root)
    out = await gitsafe.run_git(
        ["rev-parse", "--verify", "-q", f"{commit}^{{tree}}"],
        git_dir=os.path.join(r, REPO),
        work_tree=None,
        home=r,
        stage="seal-tree",
    )
    return out.stdout_text.strip()


async def seal_after_the_fact(
    ws: str | os.PathLike[str], root: str | os.PathLike[str], base: str
) -> Seal:
    """A seal for a workspace that has none (made before seals existed): its objects
    copied as they are now, and a base index read from the base tree (no stat data, so
    the patch step hashes every file). Nothing is known of how ``ws/.git`` looked, so its
    identities are not compared."""
    w = os.fspath(ws)
    r = prepare_root(root)
    write_repo_files(r, base)
    objects = os.path.join(w, ".git", "objects")
    # An objects dir that is a symlink (or a .git that is a file) is not followed.
    with contextlib.suppress(OSError):
        identity(os.path.join(w, ".git"))
        identity(objects)
        fill_objects(objects, r / REPO / "objects", link=False)
    await gitsafe.run_git(
        ["read-tree", base],
        git_dir=r / REPO,
        work_tree=None,
        home=r,
        index=r / BASE_INDEX,
        stage="seal-index",
    )
    return Seal(root=os.fspath(r), workspace=w, base=base, base_tree=await tree_of(r, base))


class Inspection(msgspec.Struct, frozen=True, kw_only=True):
    # What changed that the agent had no business changing (empty: nothing).
    evidence: list[str]
    # ``ws`` is still the directory the daemon made: reading it cannot reach anything else.
    workspace_intact: bool


async def inspect(seal: Seal) -> Inspection:
    """Compare the workspace with its seal: ``ws`` and ``ws/.git`` are the directories the
    daemon made, and the base commit still has the tree recorded at materialization."""
    evidence: list[str] = []
    intact = True
    if seal.ws_identity is not None:
        now = _identity_or_why(seal.workspace)
        if now != seal.ws_identity:
            intact = False
            evidence.append(f"workspace dir replaced (made {seal.ws_identity}, now {now})")
    if seal.dotgit_identity is not None:
        now = _identity_or_why(os.path.join(seal.workspace, ".git"))
        if now != seal.dotgit_identity:
            evidence.append(f"ws/.git replaced (made {seal.dotgit_identity}, now {now})")
    write_repo_files(seal.root, seal.base)
    try:
        tree = await tree_of(seal.root, seal.base)
    except gitsafe.CommandError as exc:
        evidence.append(f"base commit {seal.base} unreadable: {exc.stderr_tail.strip()[-300:]}")
    else:
        if tree != seal.base_tree:
            evidence.append(f"base commit's tree is {tree}, recorded {seal.base_tree}")
    return Inspection(evidence=evidence, workspace_intact=intact)


def remove_root(root: str | os.PathLike[str]) -> None:
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(root)
