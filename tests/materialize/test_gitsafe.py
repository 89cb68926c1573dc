"""arenad.materialize.gitsafe: the daemon's git names its repository and reads no one's config."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from arenad.materialize import gitsafe
from tests.materialize.gitrepo import git, make_repo


async def test_the_daemons_environment_does_not_reach_a_hardened_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")
    other = make_repo(tmp_path / "other")
    home = tmp_path / "home"
    home.mkdir()
    evil = tmp_path / "pwned"
    global_config = tmp_path / "gitconfig"
    global_config.write_text(f"[core]\n\tfsmonitor = touch {evil}\n")
    for key, value in {
        "GIT_DIR": str(other.path / ".git"),
        "GIT_WORK_TREE": str(other.path),
        "GIT_INDEX_FILE": str(other.path / ".git" / "index"),
        "GIT_CONFIG_GLOBAL": str(global_config),
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.fsmonitor",
        "GIT_CONFIG_VALUE_0": f"touch {evil}",
        "HOME": str(tmp_path),
    }.items():
        monkeypatch.setenv(key, value)
    (repo.path / "app.py").write_text("changed\n")
    out = await gitsafe.run_git(
        ["status", "--porcelain"],
        git_dir=repo.path / ".git",
        work_tree=repo.path,
        home=home,
    )
    assert out.stdout_text == " M app.py\n"
    assert not evil.exists()
    env = gitsafe.hardened_env(str(home))
    assert {k for k in env if k.startswith("GIT_")} == {
        "GIT_CONFIG_NOSYSTEM",
        "GIT_CONFIG_GLOBAL",
        "GIT_ATTR_NOSYSTEM",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_TERMINAL_PROMPT",
        "GIT_PAGER",
        "GIT_EDITOR",
        "GIT_ASKPASS",
        "GIT_PROTOCOL_FROM_USER",
        "GIT_ALLOW_PROTOCOL",
    }
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null" and env["HOME"] == env["PWD"] == str(home)
    # A source command keeps the user's config, never what would redirect it.
    source = gitsafe.source_env()
    assert "GIT_DIR" not in source and "GIT_WORK_TREE" not in source
    assert "GIT_INDEX_FILE" not in source
    assert source["GIT_CONFIG_GLOBAL"] == str(global_config)
    assert source["GIT_TERMINAL_PROMPT"] == "0"


def test_head_commit_of_a_checkout(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo.path, "config", "core.fsmonitor", f"touch {tmp_path / 'pwned'}")
    assert gitsafe.head_commit_blocking(str(repo.path)) == repo.second
    assert not (tmp_path / "pwned").exists()
    (tmp_path / "plain").mkdir()
    assert gitsafe.head_commit_blocking(str(tmp_path / "plain")) is None
    assert gitsafe.head_commit_blocking(str(tmp_path / "missing")) is None


def test_no_other_module_starts_git() -> None:
    # Every git command arenad runs goes through gitsafe: an argv that starts with "git"
    # anywhere else would bypass the hardening. (The demo only makes the user's demo repo.)
    root = Path(__file__).resolve().parents[2]
    allowed = {"arenad/materialize/gitsafe.py", "arenad/app/demo.py"}
    found = []
    for path in sorted((root / "arenad").rglob("*.py")):
        rel = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.List | ast.Tuple) and node.elts:
                first = node.elts[0]
                if isinstance(first, ast.Constant) and first.value == "git" and rel not in allowed:
                    found.append(f"{rel}:{node.lineno}")
    assert found == []
