"""Campaign files are validated completely at the edge: every mistake is a clear error
naming what and where, and `arenad submit` appends nothing when there is one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from arenad.campaign import load_campaign, render_verify_template
from arenad.errors import CampaignError
from events.specs import DEFAULT_EXCLUDES, WORKER_PROMPT_SUFFIX, SoloArm, SupervisorArm

REPO_ROOT = Path(__file__).resolve().parents[2]

GOOD = """
name = "c1"
reps = 2
[materializer]
kind = "git"
source = "./repo"
[[instances]]
instance_id = "inst-1"
base_commit = "abc"
problem_statement = "fix it"
verify_cmd = "true"
[[arms]]
name = "SOLO"
kind = "solo"
model = "p/m"
"""


def write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def arenad(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "--home", str(home), *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )


def test_a_good_campaign_resolves_into_cells(tmp_path: Path) -> None:
    campaign = load_campaign(write(tmp_path, GOOD))
    assert [c.cell_id for c in campaign.cells] == ["c1:inst-1:SOLO:0", "c1:inst-1:SOLO:1"]
    cell = campaign.cells[0]
    assert isinstance(cell.arm, SoloArm)
    assert cell.arm.prompt_suffix == WORKER_PROMPT_SUFFIX
    assert cell.excludes == list(DEFAULT_EXCLUDES)
    assert cell.materializer.source == str((tmp_path / "repo").resolve())
    assert cell.suite == "swe-bench-verified" and cell.split == "search"
    assert cell.max_output_bytes == 64 << 20  # the reference's capture cap


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('model = "p/m"', 'model = "p/m"\nbogus = 1'), "unknown field `bogus` - at `arms[0]`"),
        (("reps = 2", "reps = 2\nbogus = 1"), "unknown field `bogus`"),
        (('instance_id = "inst-1"', 'instance_id = "../x"'), "instance_id '../x' must match"),
        (('instance_id = "inst-1"', 'instance_id = ".."'), "instance_id '..' must match"),
        (('name = "c1"', 'name = "a/b"'), "campaign name 'a/b' must match"),
        (('name = "SOLO"', 'name = "SO LO"'), "arm name 'SO LO' must match"),
        (('base_commit = "abc"\n', ""), "missing required field `base_commit`"),
        (("reps = 2", 'reps = 2\nsplit = "train"'), "split"),
        (('kind = "solo"', 'kind = "robot"'), "Invalid value 'robot'"),
        (('verify_cmd = "true"', 'typo_key = "true"'), "instances[0]"),
        (("reps = 2", "reps = 0"), "reps must be at least 1"),
        (("reps = 2", "reps = 2\nmax_output_bytes = 0"), "max_output_bytes must be at least 1"),
    ],
)
def test_bad_campaigns_say_what_and_where(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    old, new = edit
    assert old in GOOD
    with pytest.raises(CampaignError) as info:
        load_campaign(write(tmp_path, GOOD.replace(old, new, 1)))
    assert message in str(info.value)
    assert str(tmp_path / "c.toml") in str(info.value)


def test_verify_templates_render_from_row_fields(tmp_path: Path) -> None:
    row = {"instance_id": "i", "test_file": "t/test_x.py", "FAIL_TO_PASS": ["a", "b"]}
    assert render_verify_template("pytest {test_file}", row, "w") == "pytest t/test_x.py"
    assert render_verify_template("echo {FAIL_TO_PASS}", row, "w") == 'echo ["a", "b"]'
    with pytest.raises(CampaignError, match="has no field 'nope'"):
        render_verify_template("pytest {nope}", row, "w")
    with pytest.raises(CampaignError, match="malformed"):
        render_verify_template("pytest {test_file", row, "w")
    with pytest.raises(CampaignError, match="not a plain field name"):
        render_verify_template("pytest {0}", row, "w")


def test_instances_file_rows_keep_extra_fields(tmp_path: Path) -> None:
    (tmp_path / "rows.jsonl").write_text(
        '{"instance_id": "a__b-1", "repo": "a/b", "base_commit": "c0", "problem_statement": "p",'
        ' "image": "img:1", "test_file": "t.py", "version": "1.0"}\n'
    )
    text = GOOD.replace(
        '[[instances]]\ninstance_id = "inst-1"\nbase_commit = "abc"\nproblem_statement = "fix it"\n'
        'verify_cmd = "true"\n',
        "",
    ).replace(
        'name = "c1"',
        'name = "c1"\ninstances_file = "rows.jsonl"\nverify_template = "pytest {test_file}"',
    )
    campaign = load_campaign(write(tmp_path, text))
    instance = campaign.cells[0].instance
    assert instance.verify_cmd == "pytest t.py"
    assert instance.extra == {"test_file": "t.py", "version": "1.0"}
    assert instance.image == "img:1"


def test_supervisor_env_knob_names_are_checked_at_submit(tmp_path: Path) -> None:
    text = GOOD.replace(
        'kind = "solo"\nmodel = "p/m"',
        'kind = "supervisor"\nworker_model = "w"\ndriver_model = "d"\n'
        '[arms.env_knobs]\n"bad-name" = "1"',
    )
    with pytest.raises(CampaignError, match="env knob name 'bad-name'"):
        load_campaign(write(tmp_path, text))
    good = text.replace('"bad-name" = "1"', 'DRIVER_CANCEL_TIMEOUT_MS = "5000"')
    arm = load_campaign(write(tmp_path, good)).cells[0].arm
    assert isinstance(arm, SupervisorArm)
    assert arm.kill_grace_s == 15.0
    assert arm.env_knobs["WORKER_BACKEND"] == "cli"
    bad = text.replace('"bad-name" = "1"', 'DRIVER_CANCEL_TIMEOUT_MS = "-5"')
    with pytest.raises(CampaignError, match="must be a positive number"):
        load_campaign(write(tmp_path, bad))


def test_image_is_the_default_and_git_is_an_explicit_opt_in(tmp_path: Path) -> None:
    no_materializer = GOOD.replace('[materializer]\nkind = "git"\nsource = "./repo"\n', "")
    with pytest.raises(CampaignError, match="names no image"):
        load_campaign(write(tmp_path, no_materializer))
    with_image = no_materializer.replace(
        'base_commit = "abc"', 'base_commit = "abc"\nimage = "x:1"'
    )
    assert load_campaign(write(tmp_path, with_image)).cells[0].materializer.kind == "image"


def test_submit_appends_nothing_on_error_and_nothing_twice(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert arenad(home, "init").returncode == 0
    bad = arenad(
        home,
        "submit",
        str(write(tmp_path, GOOD.replace("reps = 2", "reps = 2\nnope = 1"), "bad.toml")),
    )
    assert bad.returncode == 2
    assert "unknown field `nope`" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    assert arenad(home, "events", "--json").stdout == ""

    good = write(tmp_path, GOOD)
    first = arenad(home, "submit", str(good))
    assert first.returncode == 0, first.stderr
    assert "2 cell(s) submitted" in first.stdout
    count = len(arenad(home, "events", "--json").stdout.splitlines())
    assert count == 3  # two CellSubmitted and one CampaignSubmitted, in one transaction
    again = arenad(home, "submit", str(good))
    assert again.returncode == 0 and "0 cell(s) submitted, 2 already known" in again.stdout
    assert len(arenad(home, "events", "--json").stdout.splitlines()) == count

    changed = write(tmp_path, GOOD.replace('model = "p/m"', 'model = "p/other"'), "changed.toml")
    refused = arenad(home, "submit", str(changed))
    assert refused.returncode == 2 and "different spec" in refused.stderr
    assert len(arenad(home, "events", "--json").stdout.splitlines()) == count


def test_missing_campaign_file_is_a_user_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    arenad(home, "init")
    result = arenad(home, "submit", str(tmp_path / "nope.toml"))
    assert result.returncode == 2 and "cannot read campaign file" in result.stderr


@pytest.mark.parametrize("example", sorted((REPO_ROOT / "examples").glob("*.toml")))
def test_shipped_examples_validate(example: Path) -> None:
    campaign = load_campaign(example)
    assert campaign.cells


COMMAND_ARM = GOOD.replace(
    'name = "SOLO"\nkind = "solo"\nmodel = "p/m"',
    'name = "CMD"\nkind = "command"\nargv = ARGV',
)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ('["agent", "{workspace}"]', "uses {workspace}; the placeholders are"),
        ('["bash", "-c", "echo {\\"k\\": 1}"]', 'uses {"k"}'),
        ('["agent", "{ws"]', "is malformed"),
    ],
)
def test_argv_placeholders_are_checked_at_submit(tmp_path: Path, argv: str, message: str) -> None:
    with pytest.raises(CampaignError) as info:
        load_campaign(write(tmp_path, COMMAND_ARM.replace("ARGV", argv)))
    assert message in str(info.value)
    assert str(tmp_path / "c.toml") in str(info.value)


def test_argv_braces_escape_as_in_str_format(tmp_path: Path) -> None:
    argv = '["bash", "-c", "echo {{\\"k\\": 1}} > {run_dir}/x"]'
    campaign = load_campaign(write(tmp_path, COMMAND_ARM.replace("ARGV", argv)))
    assert campaign.cells[0].arm.argv[2] == 'echo {{"k": 1}} > {run_dir}/x'  # type: ignore[union-attr]


def test_the_sandbox_is_on_by_default_and_none_is_an_explicit_opt_out(tmp_path: Path) -> None:
    cell = load_campaign(write(tmp_path, GOOD)).cells[0]
    assert cell.sandbox.kind == "bwrap" and cell.sandbox.read_only == []
    (tmp_path / "data").mkdir()
    shared = GOOD + '[sandbox]\nread_only = ["./data"]\n'
    cell = load_campaign(write(tmp_path, shared)).cells[0]
    assert cell.sandbox.read_only == [str((tmp_path / "data").resolve())]
    cell = load_campaign(write(tmp_path, GOOD + '[sandbox]\nkind = "none"\n')).cells[0]
    assert cell.sandbox.kind == "none"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('kind = "docker"', "Invalid enum value 'docker' - at `sandbox.kind`"),
        ('read_only = ["./nope"]', "[sandbox] read_only[0]: "),
        ('read_only = ["/"]', "[sandbox] read_only[0]: / is a system root"),
        ('read_only = ["/tmp"]', "[sandbox] read_only[0]: /tmp is a system root"),
        ('read_only = ["~"]', "contains the user's home"),
        ('read_only = ["./secrets/x"]', "overlaps the secrets dir"),
        ("bogus = 1", "unknown field `bogus` - at `sandbox`"),
    ],
)
def test_bad_sandbox_tables_say_what_and_where(tmp_path: Path, table: str, message: str) -> None:
    (tmp_path / "secrets/x").mkdir(parents=True)
    text = GOOD + f'[secrets]\ndir = "./secrets"\nenv_files = [".env"]\n[sandbox]\n{table}\n'
    with pytest.raises(CampaignError) as info:
        load_campaign(write(tmp_path, text))
    assert message in str(info.value)
    assert str(tmp_path / "c.toml") in str(info.value)
