"""arenad.verdict.patch against a real workspace."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from arenad.materialize import Seal, WorkspaceTemplates
from arenad.verdict.patch import (
    diff_args,
    extract_checked,
    extract_patch,
    patch_line_count,
    pathspec,
)
from events.specs import DEFAULT_EXCLUDES
from tests.materialize.gitrepo import git, make_repo

EXCLUDED = [
    "tests/test_app.py",
    "pkg/tests/helper.py",
    "pkg/test/data.txt",
    "test_top.py",
    "pkg/test_mod.py",
    "thing_test.py",
    "pkg/thing_test.py",
    "conftest.py",
    "pkg/conftest.py",
    ".loops/supervisor/state.json",
    "pkg/.loops/x.json",
    ".agent/supervisor/s1/state.json",
    "pkg/.agent/x.json",
]


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def test_excludes_keep_tests_and_loops_out(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    ws = repo.path
    git(ws, "checkout", "-q", repo.first)
    _write(ws, "app.py", "v1\nfixed\n")
    _write(ws, "pkg/impl.py", "code\n")
    _write(ws, "pkg/testing_utils.py", "not a test file by the patterns\n")
    for rel in EXCLUDED:
        _write(ws, rel, "excluded\n")
    out = tmp_path / "patches" / "iid.solo.patch"
    result = await extract_patch(ws, repo.first, DEFAULT_EXCLUDES, out)
    patch = out.read_text()
    changed = [line[len("+++ b/") :] for line in patch.splitlines() if line.startswith("+++ b/")]
    assert sorted(changed) == ["app.py", "pkg/impl.py", "pkg/testing_utils.py"]
    assert result.lines == len(patch.splitlines()) == patch_line_count(patch)
    assert result.sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    assert result.bytes == out.stat().st_size and result.path == str(out)
    assert not out.with_name(out.name + ".partial").exists()
    # The patch's text comes back too, for the log: whole, as it is small.
    assert result.excerpt is not None and result.excerpt.text == patch
    assert (result.excerpt.sha256, result.excerpt.cut) == (result.sha256, "none")

    # The patch applies to a fresh checkout of base.
    fresh = tmp_path / "fresh"
    subprocess.run(["git", "clone", "-q", str(ws), str(fresh)], check=True)
    git(fresh, "checkout", "-q", repo.first)
    git(fresh, "apply", "--check", str(out))


async def test_diff_is_against_base_not_head(tmp_path: Path) -> None:
    # HEAD is on the second commit: the patch must still carry it relative to the first.
    repo = make_repo(tmp_path / "ws")
    out = tmp_path / "p.patch"
    result = await extract_patch(repo.path, repo.first, DEFAULT_EXCLUDES, out)
    text = out.read_text()
    assert "+v2" in text and "+++ b/new.py" in text
    assert result.lines > 0


async def test_a_long_patch_comes_back_bounded(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    _write(repo.path, "big.txt", "x" * 5000 + "\n")
    out = tmp_path / "p.patch"
    result = await extract_patch(repo.path, repo.first, DEFAULT_EXCLUDES, out, keep_bytes=100)
    assert result.excerpt is not None
    assert result.excerpt.text == out.read_text()[:100] and result.excerpt.cut == "head"
    assert (result.excerpt.size, result.excerpt.sha256) == (result.bytes, result.sha256)


async def test_empty_patch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    out = tmp_path / "p.patch"
    result = await extract_patch(repo.path, repo.second, DEFAULT_EXCLUDES, out)
    assert out.read_bytes() == b""
    assert result.lines == 0 and result.sha256 == hashlib.sha256(b"").hexdigest()


def test_diff_args_are_the_seeds_made_inert() -> None:
    assert diff_args("abc", ["**/tests/**", ":(exclude)already"]) == [
        "diff",
        "--cached",
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        "--ignore-submodules=all",
        "abc",
        "--",
        ".",
        ":(exclude,glob)**/tests/**",
        ":(exclude)already",
        ":(exclude,glob).loops/**",
        ":(exclude,glob)**/.loops/**",
        ":(exclude,glob).agent/**",
        ":(exclude,glob)**/.agent/**",
    ]


async def test_the_patch_is_the_seeds_bytes(tmp_path: Path) -> None:
    # On a workspace whose .git is intact, the sealed extraction gives the bytes of the
    # reference's own commands (git -C ws add -A; git -C ws diff --cached base -- <pathspec>):
    # edits, a deletion, a rename, a mode change, a symlink, a binary file, excluded files.
    repo = make_repo(tmp_path / "src")
    _write(repo.path, "moved_from.py", "".join(f"line {i}\n" for i in range(40)))
    _write(repo.path, "tool.sh", "echo hi\n")
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "-q", "-m", "more")
    base = git(repo.path, "rev-parse", "HEAD")
    templates = WorkspaceTemplates(tmp_path / "templates")
    made = await templates.materialize(
        str(repo.path), base, tmp_path / "a" / "ws", git_root=tmp_path / "a" / "git"
    )
    ws = Path(made.workspace)
    _write(ws, "app.py", "v3\n")
    (ws / "new.py").unlink()
    (ws / "moved_from.py").rename(ws / "moved_to.py")
    (ws / "tool.sh").chmod(0o755)
    (ws / "link").symlink_to("app.py")
    (ws / "blob.bin").write_bytes(bytes(range(256)))
    for rel in EXCLUDED:
        _write(ws, rel, "excluded\n")
    ours = await extract_patch(ws, base, DEFAULT_EXCLUDES, tmp_path / "ours.patch", seal=made.seal)
    git(ws, "add", "-A")
    seed = subprocess.run(
        ["git", "-C", str(ws), "diff", "--cached", base, "--", *pathspec(DEFAULT_EXCLUDES)],
        check=True,
        capture_output=True,
    ).stdout
    assert b"rename from moved_from.py" in seed and b"Binary files" in seed
    assert (tmp_path / "ours.patch").read_bytes() == seed
    assert ours.nested_repos == []


def test_patch_line_count() -> None:
    assert patch_line_count("") == 0
    assert patch_line_count("a") == 1
    assert patch_line_count("a\n") == 1
    assert patch_line_count("a\nb") == 2
    assert patch_line_count("a\n\n") == 2
    assert patch_line_count(b"a\nb\n") == 2


# -- a hostile workspace (issue 13, findings 1 and 2) ---------------------------------------

ATTACKS = Path(__file__).with_name("git_attacks.sh")
# Attacks that replace ws/.git: evidence; the others change only what the agent may.
REPLACING = {"gitdir-file", "delete-git", "recreate-git"}
NESTED = {"nested", "gitmodules"}
ALL_ATTACKS = [
    "none",
    "fsmonitor",
    "hooks-path",
    "hooks",
    "diff-external",
    "textconv",
    "diff-command",
    "filter",
    "filter-process",
    "include",
    "include-if",
    "alias",
    "pager",
    "transport",
    "editors",
    "nested",
    "gitmodules",
    "worktree",
    "autocrlf",
    "gitdir-file",
    "delete-git",
    "recreate-git",
    "objects-symlink",
    "fifo",
    "symlinks",
]


def _digest(root: Path) -> str:
    """Every path, link target and file byte under ``root``."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        if path.is_symlink():
            h.update(os.readlink(path).encode())
        elif path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


class _Scene:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        # The home lives inside a checkout: a git that loses ws/.git climbs to it.
        self.outer = tmp_path / "outer"
        make_repo(self.outer)
        self.victim = tmp_path / "victim"
        make_repo(self.victim)
        self.secret = tmp_path / "secret"
        self.secret.mkdir()
        (self.secret / "id_rsa").write_text("-----BEGIN FAKE PRIVATE KEY-----\n")
        self.pwn = tmp_path / "pwn"
        self.pwn.mkdir()
        self.source = make_repo(tmp_path / "src")
        self.templates = WorkspaceTemplates(self.outer / "home" / "templates")

    @property
    def template_git(self) -> Path:
        (made,) = [d for d in self.templates.root.iterdir() if d.is_dir()]
        return made / ".git"

    async def cell(self, name: str, attack: str) -> tuple[Path, Seal]:
        cell = self.outer / "home" / "cells" / name
        made = await self.templates.materialize(
            str(self.source.path), self.source.first, cell / "ws", git_root=cell / "git"
        )
        assert made.seal is not None
        ws = Path(made.workspace)
        attacks = ["edit"] if attack == "none" else ["edit", attack]
        subprocess.run(
            ["bash", str(ATTACKS), str(self.pwn), *attacks],
            cwd=ws,
            check=True,
            env={
                **os.environ,
                "OUTSIDE_REPO": str(self.victim),
                "SECRET_DIR": str(self.secret),
                "TEMPLATE_OBJECTS": str(self.template_git / "objects"),
            },
        )
        return ws, made.seal

    def outside(self) -> dict[str, str]:
        return {
            "outer": _digest(self.outer / ".git"),
            "victim": _digest(self.victim / ".git"),
            "template": _digest(self.template_git),
            "source": _digest(self.source.path / ".git"),
            "secret": _digest(self.secret),
        }

    def seeds_patch(self, ws: Path, *, ignore_submodules: bool) -> bytes:
        """The reference's commands on the same files with a pristine ws/.git: the reference."""
        dotgit = ws / ".git"
        if dotgit.is_dir() and not dotgit.is_symlink():
            shutil.rmtree(dotgit)
        else:
            dotgit.unlink(missing_ok=True)
        shutil.copytree(self.template_git, dotgit, symlinks=True)
        git(ws, "add", "-A")
        flags = ["--ignore-submodules=all"] if ignore_submodules else []
        spec = pathspec(DEFAULT_EXCLUDES)
        return subprocess.run(
            ["git", "-C", str(ws), "diff", "--cached", *flags, self.source.first, "--", *spec],
            check=True,
            capture_output=True,
        ).stdout


@pytest.mark.parametrize("attack", ALL_ATTACKS)
async def test_a_hostile_workspace_runs_nothing_and_reaches_nothing(
    tmp_path: Path, attack: str
) -> None:
    scene = _Scene(tmp_path)
    ws, seal = await scene.cell("a", attack)
    for marker in scene.pwn.iterdir():  # the agent's own doing, if any: not the daemon's
        marker.unlink()
    before = scene.outside()

    got = await extract_checked(ws, scene.source.first, DEFAULT_EXCLUDES, tmp_path / "p", seal)

    assert sorted(p.name for p in scene.pwn.iterdir()) == []  # nothing the agent chose ran
    assert scene.outside() == before  # no other repository (or file) was touched
    assert got.patch is not None
    patch = (tmp_path / "p").read_bytes()
    assert b"FAKE PRIVATE KEY" not in patch and b"+fixed = True" in patch
    if attack in REPLACING:
        assert got.tampered and got.tampered[0].startswith("ws/.git replaced")
    else:
        assert got.tampered == []
    assert got.patch.nested_repos == (["sub"] if attack in NESTED else [])
    # The same files with a pristine ws/.git, through the reference's commands: the same bytes.
    assert patch == scene.seeds_patch(ws, ignore_submodules=attack in NESTED)
