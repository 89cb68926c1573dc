"""arenad.verdict.grade: the grading checkout, against real git workspaces an agent edited."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from arenad.materialize import materialize_git, seal_copy
from arenad.verdict.grade import (
    Grading,
    for_grading,
    is_steering,
    place_for,
    positive_pathspec,
    verify_graded,
)
from arenad.verdict.patch import extract_checked
from events.specs import DEFAULT_EXCLUDES
from tests.conftest import make_repo

BASE = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "import calc\n\n\ndef test_add():\n    assert calc.add(2, 3) == 5\n",
    "pyproject.toml": '[project]\nname = "calc"\n',
    "logo.bin": "\x00\x01binary\x00",
}
FIXED = "def add(a, b):\n    return a + b\n"
VERIFY = "python3 -c 'import tests.test_calc as t; t.test_add()'"


class Scene:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.base = make_repo(tmp_path / "src", BASE)
        self.run_dir = tmp_path / "run"
        self.ws = self.run_dir / "ws"
        self.patch = tmp_path / "cell.patch"

    async def made(self) -> Scene:
        await materialize_git(str(self.tmp / "src"), self.base, self.ws)
        self.seal = await seal_copy(self.ws, self.tmp / "gitroot", self.base)
        return self

    def write(self, rel: str, text: str | bytes) -> None:
        path = self.ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)

    async def extracted(self) -> list[str] | None:
        got = await extract_checked(self.ws, self.base, DEFAULT_EXCLUDES, self.patch, self.seal)
        assert got.patch is not None
        return got.patch.tampered_paths

    def grading(self, verify_in: str = "checkout") -> Grading:
        return Grading(
            verify_in=verify_in,  # type: ignore[arg-type]
            run_dir=str(self.run_dir),
            workspace=str(self.ws),
            env=dict(os.environ),
            sandbox=None,
            seal=self.seal,
            patch_path=str(self.patch),
            base_env=dict(os.environ),
        )


async def test_the_checkout_is_base_plus_the_patch_never_the_agents_tests(tmp_path: Path) -> None:
    s = await Scene(tmp_path).made()
    s.write("calc.py", FIXED)
    s.write("tests/test_calc.py", "def test_add():\n    assert True\n")
    s.write("conftest.py", "import pytest\n")
    s.write("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-p evil"\n')
    s.write("evil.py", "# a pytest plugin\n")
    s.write("logo.bin", b"\x00\x02changed\x00")
    s.write("pkg/__pycache__/x.cpython-311.pyc", b"\x00")
    tampered = await s.extracted()
    assert tampered == ["conftest.py", "pyproject.toml", "tests/test_calc.py"]
    async with place_for(s.grading()) as place:
        ws = Path(place.cwd)
        assert ws.parent == s.run_dir / "grade" and place.applied is True
        assert (ws / "calc.py").read_text() == FIXED
        assert (ws / "tests/test_calc.py").read_text() == BASE["tests/test_calc.py"]
        assert (ws / "pyproject.toml").read_text() == BASE["pyproject.toml"]
        assert not (ws / "conftest.py").exists() and not (ws / ".git").exists()
        assert (ws / "evil.py").exists()  # the plugin module is in the patch, but no config
        assert (ws / "logo.bin").read_bytes() == BASE["logo.bin"].encode()
        assert place.left_out == [
            "logo.bin: binary, no data in the patch",
            # Bytecode in a repo without a .gitignore: in the patch, never applied.
            "pkg/__pycache__/x.cpython-311.pyc: binary, no data in the patch",
            "pyproject.toml: runner config, graded as in base",
        ]
        assert place.note == "applied; 3 file(s) left out"
        # The step's own private dirs, not the agent's.
        assert place.env["HOME"].startswith(str(s.run_dir / "grade"))
    assert not (s.run_dir / "grade").exists()


async def test_verify_passes_a_real_fix_and_fails_a_rewritten_test(tmp_path: Path) -> None:
    s = await Scene(tmp_path).made()
    s.write("calc.py", FIXED)
    await s.extracted()
    log = str(tmp_path / "verify.log")
    graded = await verify_graded(s.grading(), VERIFY, log, 60)
    assert graded.verify is not None and graded.verify.passed

    t = await Scene(tmp_path / "t").made()
    t.write("tests/test_calc.py", "def test_add():\n    assert True\n")
    t.write("conftest.py", "")
    assert await t.extracted() == ["conftest.py", "tests/test_calc.py"]
    # In the workspace (self-reported), the rewritten test passes; in the checkout, not.
    ws_graded = await verify_graded(t.grading("workspace"), VERIFY, log, 60)
    assert ws_graded.verify is not None and ws_graded.verify.passed
    assert ws_graded.place.verify_in == "workspace" and ws_graded.place.applied is None
    graded = await verify_graded(t.grading(), VERIFY, log, 60)
    assert graded.verify is not None and not graded.verify.passed


async def test_a_patch_that_does_not_apply_is_unresolved_with_gits_reason(tmp_path: Path) -> None:
    s = await Scene(tmp_path).made()
    s.write("calc.py", FIXED)
    await s.extracted()
    s.patch.write_text(s.patch.read_text().replace("-    return a - b", "-    return a * b"))
    log = tmp_path / "verify.log"
    graded = await verify_graded(s.grading(), "true", str(log), 60)
    assert graded.verify is None and graded.place.applied is False
    assert graded.place.note is not None and graded.place.note.startswith(
        "the patch does not apply: error: patch failed: calc.py:1"
    )
    assert "verify did not run: the patch does not apply" in log.read_text()
    assert not (s.run_dir / "grade").exists()


async def test_an_empty_patch_grades_base(tmp_path: Path) -> None:
    s = await Scene(tmp_path).made()
    assert await s.extracted() == []
    graded = await verify_graded(s.grading(), VERIFY, str(tmp_path / "v.log"), 60)
    assert graded.verify is not None and not graded.verify.passed
    assert graded.place.note == "empty patch"


async def test_no_seal_is_never_graded_on_the_agents_objects(tmp_path: Path) -> None:
    s = await Scene(tmp_path).made()
    await s.extracted()
    grading = s.grading()
    graded = await verify_graded(
        msgspec.structs.replace(grading, seal=None), "true", str(tmp_path / "v.log"), 60
    )
    assert graded.verify is None and graded.place.applied is False


@pytest.mark.parametrize(
    ("path", "steering"),
    [
        ("conftest.py", True),
        ("a/b/conftest.py", True),
        ("pytest.ini", True),
        ("sub/tox.ini", True),
        ("setup.cfg", True),
        ("pyproject.toml", True),
        ("sitecustomize.py", True),
        ("lib/x.pth", True),
        ("my_conftest.py", False),
        ("pyproject.toml.bak", False),
        ("calc.py", False),
    ],
)
def test_steering_paths(path: str, steering: bool) -> None:
    assert is_steering(path) is steering


def test_for_grading_leaves_out_both_sides_of_a_rename() -> None:
    patch = (
        b"diff --git a/pytest.ini b/notes.txt\nsimilarity index 100%\n"
        b"rename from pytest.ini\nrename to notes.txt\n"
        b"diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    kept, left_out = for_grading(patch)
    assert kept.startswith(b"diff --git a/calc.py") and left_out == [
        "pytest.ini: runner config, graded as in base"
    ]


def test_positive_pathspecs() -> None:
    assert positive_pathspec("**/tests/**") == ":(glob)**/tests/**"
    assert positive_pathspec(":(exclude,glob)x/**") == ":(glob)x/**"
    assert positive_pathspec(":!x") == ":x"
    assert positive_pathspec(":(exclude)x") == "x"
