"""Build arenad's local SWE-bench: a few real instances, offline (scripts/build-local-swebench).

The repository is ``examples/swebench-local/textkit`` (a small real Python project with a
real pytest suite), in its fixed state. Each instance injects one bug into a copy, removes
the tests that catch it (the ``# >>> <iid>`` ... ``# <<< <iid>`` blocks of its test file)
and commits that as its base. Then, as SWE-bench's columns:

- ``patch`` (the gold fix) and ``test_patch`` (the removed tests) are ``git diff``s
  against the base;
- ``FAIL_TO_PASS`` / ``PASS_TO_PASS`` come from running the suite (``pytest -rA``) on the
  base with the test patch, then with the gold patch too, in the instance's image;
- the image, ``swebench/sweb.eval.x86_64.<iid, __ -> _1776_>:latest`` (SWE-bench's name,
  arenad's default), is ``FROM`` the debootstrap base image (scripts/build-base-image) with
  the base checkout at ``/testbed``; an image whose label already names this content is
  kept.

The rows are written as the hub's parquet (``data/test-00000-of-00001.parquet``) under the
output directory, JSON lists as text like the hub's. Commits have fixed dates and authors,
so the same sources give the same base commits and the same file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "examples" / "swebench-local" / "textkit"
BASE_IMAGE = "local/deb-py:bookworm"
TEST_CMD = "python3 -m pytest -rA -p no:cacheprovider tests"
LABEL = "arenad.local-swebench"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "textkit",
    "GIT_AUTHOR_EMAIL": "textkit@localhost",
    "GIT_COMMITTER_NAME": "textkit",
    "GIT_COMMITTER_EMAIL": "textkit@localhost",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}

# Each instance: the file its bug is in, the fixed text and the injected one, the test
# file holding its tests block, and what a user would report.
INSTANCES = [
    {
        "instance_id": "arenad__textkit-1",
        "file": "textkit/roman.py",
        "fixed": """_NUMERALS = [
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
]""",
        "buggy": """_NUMERALS = [
    (1000, "M"),
    (500, "D"),
    (100, "C"),
    (50, "L"),
    (10, "X"),
    (5, "V"),
    (1, "I"),
]""",
        "tests": "tests/test_roman.py",
        "problem_statement": (
            "to_roman writes additive numerals only\n\n"
            "`textkit.to_roman(4)` returns `'IIII'` and `to_roman(1994)` returns"
            " `'MDCCCCLXXXXIIII'`; the standard forms are `'IV'` and `'MCMXCIV'`. Because"
            " `from_roman` checks that a numeral is canonical by converting back, it also"
            " rejects valid numerals such as `'IX'`."
        ),
    },
    {
        "instance_id": "arenad__textkit-2",
        "file": "textkit/intervals.py",
        "fixed": "        if merged and start <= merged[-1][1]:",
        "buggy": "        if merged and start < merged[-1][1]:",
        "tests": "tests/test_intervals.py",
        "problem_statement": (
            "merge() keeps touching intervals apart\n\n"
            "The docstring of `textkit.intervals.merge` says intervals that touch become"
            " one, but `merge([(1, 2), (2, 3)])` returns `[(1, 2), (2, 3)]` instead of"
            " `[(1, 3)]`."
        ),
    },
    {
        "instance_id": "arenad__textkit-3",
        "file": "textkit/stats.py",
        "fixed": "    return (data[mid - 1] + data[mid]) / 2",
        "buggy": "    return data[mid]",
        "tests": "tests/test_stats.py",
        "problem_statement": (
            "median of an even number of values is wrong\n\n"
            "`textkit.median([1, 10])` returns `10`; the median of an even count is the mean"
            " of the two middle values, `5.5`."
        ),
    },
]

_BLOCK = re.compile(r"^# >>> (\S+)\n(.*?)^# <<< \1\n", re.M | re.S)
_RESULT = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL) (\S+)", re.M)


def image_name(instance_id: str) -> str:
    return f"swebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest"


def git(cwd: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"build-local-swebench: git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def strip_blocks(text: str, keep_none_of: str | None) -> str:
    """``text`` with the tests block of ``keep_none_of`` removed and every other block's
    markers dropped (their tests kept)."""

    def repl(m: re.Match[str]) -> str:
        return "" if m.group(1) == keep_none_of else m.group(2)

    return _BLOCK.sub(repl, text)


def copy_project(dest: Path) -> None:
    shutil.copytree(
        PROJECT,
        dest,
        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc"),
    )


def make_base(inst: dict[str, str], testbed: Path) -> str:
    copy_project(testbed)
    for path in testbed.rglob("test_*.py"):
        path.write_text(strip_blocks(path.read_text(), inst["instance_id"]))
    src = testbed / inst["file"]
    text = src.read_text()
    if inst["fixed"] not in text:
        sys.exit(f"build-local-swebench: {inst['file']} no longer holds the fixed text")
    src.write_text(text.replace(inst["fixed"], inst["buggy"], 1))
    (testbed / ".gitignore").write_text("__pycache__/\n*.pyc\n.pytest_cache/\n")
    git(testbed, "init", "-q", "-b", "main")
    git(testbed, "add", "-A")
    git(testbed, "commit", "-q", "-m", f"textkit at the base of {inst['instance_id']}")
    return git(testbed, "rev-parse", "HEAD").strip()


def diff_of(testbed: Path, path: str, text: str) -> str:
    """The diff that turns the base's ``path`` into ``text`` (the tree is left as it was)."""
    target = testbed / path
    before = target.read_text()
    target.write_text(text)
    out = git(testbed, "diff", "--", path)
    target.write_text(before)
    return out


def statuses(image: str, testbed: Path, patches: list[str]) -> dict[str, str]:
    """Each test's status on the base with ``patches`` applied, run in ``image``."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "testbed"
        shutil.copytree(testbed, work)
        for n, patch in enumerate(patches):
            pf = Path(tmp) / f"{n}.diff"
            pf.write_text(patch)
            git(work, "apply", str(pf))
        done = subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network=none",
                "-v",
                f"{work}:/testbed",
                "-w",
                "/testbed",
                image,
                "bash",
                "-c",
                TEST_CMD,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    found = dict((name, status) for status, name in _RESULT.findall(done.stdout))
    if not found:
        sys.exit(f"build-local-swebench: the suite printed no results:\n{done.stdout[-2000:]}")
    return found


def build_image(inst_dir: Path, image: str, content: str) -> None:
    existing = subprocess.run(
        [
            "docker",
            "image",
            "inspect",
            "--format",
            f'{{{{index .Config.Labels "{LABEL}"}}}}',
            image,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if existing.returncode == 0 and existing.stdout.strip() == content:
        return
    (inst_dir / "Dockerfile").write_text(
        f'FROM {BASE_IMAGE}\nCOPY testbed /testbed\nWORKDIR /testbed\nLABEL {LABEL}="{content}"\n'
    )
    done = subprocess.run(
        ["docker", "build", "-q", "-t", image, str(inst_dir)], capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"build-local-swebench: docker build {image} failed: {done.stderr.strip()}")


def build(out: Path) -> list[dict[str, str]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for inst in INSTANCES:
            iid = inst["instance_id"]
            inst_dir = Path(tmp) / iid
            testbed = inst_dir / "testbed"
            base = make_base(inst, testbed)
            fixed_src = (PROJECT / inst["file"]).read_text()
            patch = diff_of(testbed, inst["file"], fixed_src)
            tests_full = strip_blocks((PROJECT / inst["tests"]).read_text(), None)
            test_patch = diff_of(testbed, inst["tests"], tests_full)
            image = image_name(iid)
            content = hashlib.sha256((base + patch + test_patch).encode()).hexdigest()[:16]
            build_image(inst_dir, image, content)
            before = statuses(image, testbed, [test_patch])
            after = statuses(image, testbed, [test_patch, patch])
            f2p = sorted(t for t, s in after.items() if s == "PASSED" and before.get(t) != s)
            p2p = sorted(t for t, s in after.items() if s == "PASSED" and before.get(t) == s)
            if not f2p:
                sys.exit(f"build-local-swebench: {iid}: no test fails before the fix")
            rows.append(
                {
                    "repo": "arenad/textkit",
                    "instance_id": iid,
                    "base_commit": base,
                    "patch": patch,
                    "test_patch": test_patch,
                    "problem_statement": inst["problem_statement"],
                    "hints_text": "",
                    "created_at": "2026-01-01T00:00:00Z",
                    "version": "1.0",
                    "FAIL_TO_PASS": json.dumps(f2p),
                    "PASS_TO_PASS": json.dumps(p2p),
                    "environment_setup_commit": base,
                }
            )
            print(
                f"{iid}: {image} base {base[:12]}, {len(f2p)} FAIL_TO_PASS, {len(p2p)} PASS_TO_PASS"
            )
    return rows


def write_parquet(rows: list[dict[str, str]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(rows[0])
    table = pa.table({c: pa.array([r[c] for r in rows], type=pa.string()) for c in columns})
    tmp = path.with_name(path.name + ".partial")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


GOLD_CAMPAIGN = """\
# Written by scripts/build-local-swebench: the local SWE-bench with the gold patch as a
# command arm's "agent" (no model, no credentials), graded by the official rules. Every
# instance resolves. examples/swebench-local.toml is the same campaign with a model's arm.
name = "swebench-local-gold"
instances_file = {parquet}
verify_template = "! git diff --quiet {{base_commit}}"

[materializer]
kind = "image"

[judge]
kind = "swebench"
test_cmd = {test_cmd}
log_parser = "pytest"
timeout_s = 600
memory_mb = 2048

[sandbox]
read_only = [{gold}]

[[arms]]
name = "GOLD"
kind = "command"
uses_model = false
argv = ["bash", "-c", "git apply \\"$0/$(git rev-parse HEAD).patch\\"", {gold}]
"""


def write_gold(rows: list[dict[str, str]], out: Path, parquet: Path) -> Path:
    """The gold patches by base commit (what the GOLD arm reads) and its campaign file."""
    gold = out / "data" / "gold"
    gold.mkdir(parents=True, exist_ok=True)
    for row in rows:
        (gold / f"{row['base_commit']}.patch").write_text(row["patch"])
    campaign = out / "gold.toml"
    campaign.write_text(
        GOLD_CAMPAIGN.format(
            parquet=json.dumps(str(parquet)),
            test_cmd=json.dumps(TEST_CMD),
            gold=json.dumps(str(gold)),
        )
    )
    return campaign


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "examples" / "swebench-local",
        help="where data/test-00000-of-00001.parquet goes (default: examples/swebench-local)",
    )
    args = parser.parse_args()
    rows = build(args.out)
    dest = args.out / "data" / "test-00000-of-00001.parquet"
    write_parquet(rows, dest)
    campaign = write_gold(rows, args.out, dest)
    print(f"wrote {len(rows)} instances to {dest}; the gold arm's campaign: {campaign}")


if __name__ == "__main__":
    main()
