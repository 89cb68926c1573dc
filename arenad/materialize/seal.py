"""A workspace's seal: what the daemon keeps of a workspace it made, before any agent ran.

The agent owns ``ws/.git``; the daemon never reads it again after materialization. Instead
each cell has a *git root* the daemon owns, outside the run dir (so the sandbox hides it),
itself a git dir::

    <root>/HEAD, refs/  HEAD = base (detached); no config (git's defaults, plus gitsafe's
                        overrides, are all it reads) and no hooks
    <root>/objects/     the base commit's objects
    <root>/index        the private index of the patch step: at first the workspace's index
                        as the daemon left it (base's entries, stat data of its own files)
    <root>/base.index   a copy of that first index, kept only when base has gitlinks
                        (nested repositories), to tell the agent's new ones apart
    <root>/base.tree    what the patch step's ``rev-parse <base>^{tree}`` said
    <root>/tampered.out the paths the patch step found changed under the excludes and
                        runner-steering config (arenad.verdict.grade)

and records (in CellMaterialized) the base commit's tree and the identity of ``ws`` and
``ws/.git``: (device, inode, inode generation). ext4 gives a freed inode number to the next
file at once, so ``rm -rf .git && git init`` keeps (device, inode); the generation
(``FS_IOC_GETVERSION``) tells them apart. Where the filesystem has none (tmpfs), the pair
alone is kept, written ``dev:ino:-``.

The repo's objects must be files no agent can write: for a template's copy they are hard
links to the template's (which the sandbox hides, and which no cell's workspace shares);
for any other workspace they are copies of its objects, taken before the agent ran.

Everything here is a handful of small files made once per cell: on a filesystem where
creating an inode is slow (this VM's ext4 after many deletions), each one counts.
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

from arenad.materialize import gitindex, gitsafe

FS_IOC_GETVERSION = 0x80087601
INDEX = "index"
BASE_INDEX = "base.index"
TREE_OUT = "base.tree"
TAMPER_OUT = "tampered.out"
# A gitlink entry's mode (0o160000) as it sits in an index entry: a cheap "maybe" before a
# parse (false positives are harmless).
_GITLINK_MODE = struct.pack(">I", 0o160000)


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
        return self.root

    @property
    def index(self) -> str:
        return os.path.join(self.root, INDEX)

    @property
    def base_index(self) -> str:
        return os.path.join(self.root, BASE_INDEX)

    @property
    def tree_out(self) -> str:
        return os.path.join(self.root, TREE_OUT)

    @property
    def tamper_out(self) -> str:
        return os.path.join(self.root, TAMPER_OUT)


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


def _prepare_root(root: str | os.PathLike[str], base: str) -> Path:
    """An empty git root at ``root`` (replacing any previous one): HEAD, refs/ and objects/
    (the three things that make a git dir)."""
    r = Path(root)
    if r.is_symlink() or r.is_file():
        r.unlink()
    elif r.exists():
        shutil.rmtree(r)
    os.makedirs(r / "refs")
    os.mkdir(r / "objects")
    _create(r / "HEAD", base.encode() + b"\n")
    return r


def _create(path: str | os.PathLike[str], data: bytes) -> None:
    """A new file (the root is fresh: nothing to replace atomically)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def fill_objects(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, link: bool) -> None:
    """Put the object store at ``src`` under ``dst`` (an existing dir): hard links when
    ``link`` (a copy where a link is refused), else copies. Regular files and directories
    only: a symlink, FIFO or socket in an object store is nobody's object. Empty dirs are
    left out (git makes what it needs)."""
    with os.scandir(src) as entries:
        for entry in entries:
            target = os.path.join(dst, entry.name)
            if entry.is_dir(follow_symlinks=False):
                with os.scandir(entry.path) as inside:
                    if next(inside, None) is None:
                        continue
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
    (the template's, linked; or the workspace's own, copied), the private index (``index``,
    else the workspace's), and the identities of ``ws`` and ``ws/.git``."""
    w = os.fspath(ws)
    r = _prepare_root(root, base)
    fill_objects(objects, r / "objects", link=link_objects)
    if index is None:
        with open(os.path.join(w, ".git", "index"), "rb") as f:
            index = f.read()
    _create(r / INDEX, index)
    if _GITLINK_MODE in index:
        _create(r / BASE_INDEX, index)
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
    out = await gitsafe.run_git(tree_args(commit), git_dir=r, work_tree=None, home=r)
    return out.stdout_text.strip()


def tree_args(commit: str) -> list[str]:
    return ["rev-parse", "--verify", "-q", f"{commit}^{{tree}}"]


def tree_evidence(seal: Seal, output: str) -> str | None:
    """What ``rev-parse <base>^{tree}`` printed (its tree id, or its error), judged
    against the recorded tree: None when they agree."""
    said = output.strip()
    if said == seal.base_tree:
        return None
    if len(said) in (40, 64) and all(c in "0123456789abcdef" for c in said):
        return f"base commit's tree is {said}, recorded {seal.base_tree}"
    return f"base commit {seal.base} unreadable: {said[-300:] or 'no such commit'}"


async def seal_after_the_fact(
    ws: str | os.PathLike[str], root: str | os.PathLike[str], base: str
) -> Seal:
    """A seal for a workspace that has none (made before seals existed): its objects
    copied as they are now, and an index read from the base tree (no stat data, so the
    patch step hashes every file). Nothing is known of how ``ws/.git`` looked, so its
    identities are not compared."""
    w = os.fspath(ws)
    r = _prepare_root(root, base)
    objects = os.path.join(w, ".git", "objects")
    # An objects dir that is a symlink (or a .git that is a file) is not followed.
    with contextlib.suppress(OSError):
        identity(os.path.join(w, ".git"))
        identity(objects)
        fill_objects(objects, r / "objects", link=False)
    await gitsafe.run_git(["read-tree", base], git_dir=r, work_tree=None, home=r, index=r / INDEX)
    shutil.copyfile(r / INDEX, r / BASE_INDEX)
    return Seal(root=os.fspath(r), workspace=w, base=base, base_tree=await tree_of(r, base))


class Inspection(msgspec.Struct, frozen=True, kw_only=True):
    # What changed that the agent had no business changing (empty: nothing).
    evidence: list[str]
    # ``ws`` is still the directory the daemon made: reading it cannot reach anything else.
    workspace_intact: bool


def inspect_dirs(seal: Seal) -> Inspection:
    """``ws`` and ``ws/.git`` are still the directories the daemon made (in-process; the
    base's tree is checked by the patch step's own git run, see :func:`tree_evidence`)."""
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
    return Inspection(evidence=evidence, workspace_intact=intact)


def nested_repos(seal: Seal) -> list[str] | None:
    """Gitlinks in the private index that base did not have (same path and commit): the
    agent's nested repositories. None when an index cannot be read."""
    try:
        with open(seal.index, "rb") as f:
            data = f.read()
        if _GITLINK_MODE not in data:
            return []
        after = gitindex.gitlinks_of(data)
        before = gitindex.gitlinks(seal.base_index) if os.path.exists(seal.base_index) else {}
    except (OSError, gitindex.IndexFormatError):
        return None
    return sorted(path for path, commit in after.items() if before.get(path) != commit)
