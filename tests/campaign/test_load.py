"""Campaign files are validated completely at the edge: every mistake is a clear error
naming what and where, and `arenad submit` appends nothing when there is one."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from arenad.campaign import load_campaign, render_verify_template
from arenad.errors import CampaignError
from events.specs import (
    DEFAULT_EXCLUDES,
    WORKER_PROMPT_SUFFIX,
    ExecutorSpec,
    SoloArm,
    SupervisorArm,
)
from tests.conftest import make_repo
from tests.swebench_support import local_swebench  # noqa: F401

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
        (
            ("reps = 2", 'reps = 2\n[executor]\nkind = "k8s"'),
            "Invalid enum value 'k8s' - at `executor.kind`",
        ),
        (
            ("reps = 2", 'reps = 2\n[executor]\nkind = "local"\nresources = { slot = 1 }'),
            'resources are for kind = "ray"',
        ),
        (
            ("reps = 2", 'reps = 2\n[executor]\nkind = "ray"\nresources = { slot = 1.5 }'),
            "resources.slot must be above 0, and whole above 1",
        ),
        (
            ("reps = 2", 'reps = 2\n[executor]\nkind = "ray"\nresources = { slot = 0 }'),
            "resources.slot must be above 0",
        ),
        (
            ("reps = 2", 'reps = 2\n[executor]\nkind = "ray"\nresources = { memory = 1 }'),
            "'memory' is not a resource name",
        ),
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


def test_an_executor_table_goes_into_every_cell(tmp_path: Path) -> None:
    text = GOOD.replace(
        "reps = 2", 'reps = 2\n[executor]\nkind = "ray"\nresources = { arenad_slot = 1, GPU = 0.5 }'
    )
    cells = load_campaign(write(tmp_path, text)).cells
    assert [c.executor for c in cells] == [
        ExecutorSpec(kind="ray", resources={"arenad_slot": 1.0, "GPU": 0.5})
    ] * 2
    assert load_campaign(write(tmp_path, GOOD)).cells[0].executor is None


def test_verify_templates_render_from_row_fields(tmp_path: Path) -> None:
    row = {"instance_id": "i", "test_file": "t/test_x.py", "FAIL_TO_PASS": ["a", "b"]}
    assert render_verify_template("pytest {test_file}", row, "w") == "pytest t/test_x.py"
    assert render_verify_template("echo {FAIL_TO_PASS}", row, "w") == """echo '["a", "b"]'"""
    with pytest.raises(CampaignError, match="has no field 'nope'"):
        render_verify_template("pytest {nope}", row, "w")
    with pytest.raises(CampaignError, match="malformed"):
        render_verify_template("pytest {test_file", row, "w")
    with pytest.raises(CampaignError, match="not a plain field name"):
        render_verify_template("pytest {0}", row, "w")


def test_template_fields_are_shell_quoted_and_an_injection_is_inert(tmp_path: Path) -> None:
    evil = "'; touch /tmp/x; exit 0; '"
    row = {"instance_id": "i", "f": evil, "name": "it's"}
    cmd = render_verify_template("test -n {f} && echo {name}", row, "w")
    assert shlex.split(cmd) == ["test", "-n", evil, "&&", "echo", "it's"]
    marker = tmp_path / "x"
    out = subprocess.run(
        [
            "bash",
            "-c",
            render_verify_template("printf %s {f}; false", {"f": f"; touch {marker}"}, "w"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.stdout == f"; touch {marker}" and out.returncode == 1 and not marker.exists()


@pytest.mark.parametrize(
    "template",
    ["pytest '{f}'", 'pytest "{f}"', 'pytest "a {f} b"', "echo 'x' \"y {f}\""],
)
def test_a_field_inside_quotes_is_refused_at_load(tmp_path: Path, template: str) -> None:
    text = GOOD.replace('name = "c1"', f'name = "c1"\nverify_template = {json.dumps(template)}')
    with pytest.raises(CampaignError, match=r"verify_template puts \{f\} inside") as info:
        load_campaign(write(tmp_path, text))
    assert str(tmp_path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("template", ["pytest {f}", "echo 'a' {f} \"b\"", "echo \\'{f}"])
def test_a_bare_field_is_accepted(template: str) -> None:
    assert render_verify_template(template, {"f": "v"}, "w").endswith(("v", '"b"'))


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
    _loops_checkout(tmp_path)
    text = SUPERVISOR_ARM + '\n[arms.env_knobs]\n"bad-name" = "1"'
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

    # Submit checks the source holds the base commit: a real one here.
    base = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    good = write(tmp_path, GOOD.replace('base_commit = "abc"', f'base_commit = "{base}"'))
    first = arenad(home, "submit", str(good))
    assert first.returncode == 0, first.stderr
    assert "2 cell(s) submitted" in first.stdout
    count = len(arenad(home, "events", "--json").stdout.splitlines())
    assert count == 3  # two CellSubmitted and one CampaignSubmitted, in one transaction
    again = arenad(home, "submit", str(good))
    assert again.returncode == 0 and "0 cell(s) submitted, 2 already known" in again.stdout
    assert len(arenad(home, "events", "--json").stdout.splitlines()) == count

    changed = write(
        tmp_path,
        GOOD.replace('model = "p/m"', 'model = "p/other"').replace(
            'base_commit = "abc"', f'base_commit = "{base}"'
        ),
        "changed.toml",
    )
    refused = arenad(home, "submit", str(changed))
    assert refused.returncode == 2 and "different spec" in refused.stderr
    assert len(arenad(home, "events", "--json").stdout.splitlines()) == count


def test_missing_campaign_file_is_a_user_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    arenad(home, "init")
    result = arenad(home, "submit", str(tmp_path / "nope.toml"))
    assert result.returncode == 2 and "cannot read campaign file" in result.stderr


@pytest.mark.parametrize("example", sorted((REPO_ROOT / "examples").glob("*.toml")))
def test_shipped_examples_validate(
    example: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    # The supervisor example names ~/code/loops: a checkout where the reference keeps it.
    _loops_checkout(tmp_path / "code")
    monkeypatch.setenv("HOME", str(tmp_path))
    if example.name == "swebench-local.toml":
        # Its instances and images are built by scripts/build-local-swebench (not committed):
        # the same file, pointed at the ones the session built.
        built = request.getfixturevalue("local_swebench")
        text = example.read_text(encoding="utf-8").replace(
            'instances_file = "swebench-local/data/test-00000-of-00001.parquet"',
            f"instances_file = {json.dumps(str(built.parquet))}",
        )
        example = tmp_path / example.name
        example.write_text(text, encoding="utf-8")
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


# -- limits (issue 14, findings 1, 3 and 4) ------------------------------------------


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # Finding 1: a campaign of a billion cells grew to 14 GB before it was killed.
        (("reps = 2", "reps = 1000000000"), "expands to 1000000000 cells"),
        (("reps = 2", "reps = 2\nmax_cells = 1"), "more than max_cells = 1"),
        (("reps = 2", "reps = 2\nmax_cells = 0"), "max_cells must be at least 1"),
        # Finding 3: negative, NaN and infinite durations.
        (('model = "p/m"', 'model = "p/m"\ntimeout_s = -5'), "timeout_s = -5.0 must be a finite"),
        (('model = "p/m"', 'model = "p/m"\ntimeout_s = nan'), "timeout_s = nan must be a finite"),
        (('model = "p/m"', 'model = "p/m"\ntimeout_s = inf'), "timeout_s = inf must be a finite"),
        (('model = "p/m"', 'model = "p/m"\ntimeout_s = 0'), "timeout_s = 0.0 must be"),
        (('model = "p/m"', 'model = "p/m"\ntimeout_s = 1e12'), "at most 2592000"),
        (('model = "p/m"', 'model = "p/m"\nkill_grace_s = -1'), "kill_grace_s = -1.0 must be"),
        (('model = "p/m"', 'model = "p/m"\nkill_grace_s = nan'), "kill_grace_s = nan must be"),
        (("reps = 2", "reps = 2\nverify_timeout_s = -1"), "verify_timeout_s = -1.0 must be"),
        # Finding 4: names too long for a file name failed at materialize, three times.
        (('name = "c1"', f'name = "{"c" * 10_000}"'), "(10000 characters) is longer than 128"),
        (('instance_id = "inst-1"', f'instance_id = "{"i" * 10_000}"'), "longer than 128"),
        (('name = "SOLO"', f'name = "{"A" * 65}"'), "arm name 'AAAA"),
        # The budget and the selection keys.
        (("reps = 2", "reps = 2\n[budget]\nmax_usd = -1"), "[budget] max_usd = -1.0 must be"),
        (("reps = 2", "reps = 2\n[budget]\nmax_usd = nan"), "[budget] max_usd = nan must be"),
        (
            ("reps = 2", "reps = 2\n[budget]\nmax_usd = 1\nexpected_usd_per_attempt = 0"),
            "[budget] expected_usd_per_attempt = 0.0 must be a finite number > 0",
        ),
        (
            ("reps = 2", "reps = 2\n[budget]\nmax_usd = 1\nexpected_usd_per_attempt = inf"),
            "[budget] expected_usd_per_attempt = inf must be",
        ),
        (
            ("reps = 2", "reps = 2\n[budget]\nmax_usd = 1\nexpected_usd_per_attempt = nan"),
            "[budget] expected_usd_per_attempt = nan must be",
        ),
        (("reps = 2", 'reps = 2\ninstance_filter = "("'), "instance_filter '(' is not a regex"),
        (("reps = 2", 'reps = 2\ninstance_filter = "^nope"'), "the selection keeps no instance"),
        (("reps = 2", 'reps = 2\ninstance_ids = ["x", "y"]'), "names 2 instance(s) not in"),
        (("reps = 2", "reps = 2\ninstance_ids = []"), "instance_ids must name at least one"),
        (("reps = 2", "reps = 2\nlimit = 0"), "limit must be at least 1"),
    ],
)
def test_limits_are_checked_at_submit(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    old, new = edit
    with pytest.raises(CampaignError) as info:
        load_campaign(write(tmp_path, GOOD.replace(old, new, 1)))
    assert message in str(info.value)
    assert str(tmp_path / "c.toml") in str(info.value)


def test_every_name_fits_a_file_name_with_every_suffix() -> None:
    from arenad.campaign import load as c

    longest = "i" * c.MAX_INSTANCE_ID + "." + "a" * c.MAX_ARM_NAME + c.LONGEST_SUFFIX
    assert len(longest.encode()) <= c.NAME_MAX_BYTES
    assert c.MAX_CAMPAIGN_NAME <= c.NAME_MAX_BYTES


def test_longest_names_materialize_as_real_files(tmp_path: Path) -> None:
    from arenad.campaign import load as c
    from arenad.home import Home

    iid, arm = "i" * c.MAX_INSTANCE_ID, "A" * c.MAX_ARM_NAME
    home = Home(tmp_path)
    patch = home.patch_path("c" * c.MAX_CAMPAIGN_NAME, 0, 1, iid, arm)
    partial = patch.with_name(patch.name + ".partial")
    partial.parent.mkdir(parents=True)
    partial.write_text("x")  # no "file name too long"
    run_dir = home.run_dir("c" * c.MAX_CAMPAIGN_NAME, 0, 1, iid, arm)
    run_dir.mkdir(parents=True)


def test_max_cells_is_raisable(tmp_path: Path) -> None:
    text = GOOD.replace("reps = 2", "reps = 3\nmax_cells = 3")
    assert load_campaign(write(tmp_path, text)).cell_count == 3


def test_a_huge_campaign_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    # The count is a product of the validated parts; no cell is made.
    text = GOOD.replace("reps = 2", "reps = 9223372036854775807")
    with pytest.raises(CampaignError, match="expands to 9223372036854775807 cells"):
        load_campaign(write(tmp_path, text))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'name = "c1"\nreps = \xff\n', "c.toml:2: not UTF-8 (byte 0xff"),
        (b'name = "c1"\nreps = = 2\n', "not valid TOML: Invalid value (at line 2, column 8)"),
    ],
)
def test_a_campaign_file_that_does_not_decode_is_one_line(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(content)
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_invalid_utf8_instances_file_exits_2_with_one_line(tmp_path: Path) -> None:
    # Finding 2 of issue 14, through the CLI: exit 2, one line, no traceback, nothing written.
    home = tmp_path / "home"
    assert arenad(home, "init").returncode == 0
    (tmp_path / "rows.jsonl").write_bytes(b'{"instance_id": "a\xff"}\n')
    result = arenad(home, "submit", str(write(tmp_path, _with_file(GOOD, "rows.jsonl"))))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"arenad: {tmp_path / 'rows.jsonl'}:1: not UTF-8 (byte 0xff: invalid start byte)"
    )
    assert arenad(home, "events", "--json").stdout == ""


# -- instance files and selection (issue 18) -----------------------------------------

ROW_KEYS = "instance_id, base_commit, problem_statement"


def _with_file(text: str, name: str, extra: str = "") -> str:
    inline = (
        '[[instances]]\ninstance_id = "inst-1"\nbase_commit = "abc"\nproblem_statement = "fix it"\n'
        'verify_cmd = "true"\n'
    )
    assert inline in text
    return text.replace(inline, "").replace(
        'name = "c1"',
        f'name = "c1"\ninstances_file = "{name}"\nverify_template = "pytest {{test_file}}"{extra}',
    )


def _rows(n: int) -> list[dict[str, object]]:
    return [
        {
            "instance_id": f"org__proj-{i}",
            "repo": "org/proj",
            "base_commit": f"{i:040x}",
            "problem_statement": f"problem {i}",
            "test_file": f"tests/test_{i}.py",
            "FAIL_TO_PASS": f'["tests/test_{i}.py::t"]',
        }
        for i in range(n)
    ]


def test_every_form_of_instances_gives_identical_cells(tmp_path: Path) -> None:
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from arenad.campaign import spec_sha256

    rows = _rows(7)
    (tmp_path / "i.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "i.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "i.parquet", row_group_size=3)
    # The hub's shards, and a dataset as datasets.save_to_disk leaves it.
    (tmp_path / "data").mkdir()
    for k, part in enumerate((rows[:4], rows[4:])):
        pq.write_table(pa.Table.from_pylist(part), tmp_path / f"data/test-0000{k}-of-00002.parquet")
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"), num_shards=2)
    digests = []
    names = ("i.jsonl", "i.json", "i.parquet", "data/test-*.parquet", "data", "saved")
    for n, name in enumerate(names):
        campaign = load_campaign(write(tmp_path, _with_file(GOOD, name), f"c{n}.toml"))
        digests.append([spec_sha256(c) for c in campaign.cells])
    assert len(digests[0]) == 14
    assert all(d == digests[0] for d in digests[1:])


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ("", [f"org__proj-{i}" for i in range(6)]),
        ('\ninstance_ids = ["org__proj-4", "org__proj-1"]', ["org__proj-1", "org__proj-4"]),
        ('\ninstance_filter = "-[135]$"', ["org__proj-1", "org__proj-3", "org__proj-5"]),
        ("\nlimit = 2", ["org__proj-0", "org__proj-1"]),
        # In order: the ids, then the filter, then the limit.
        (
            '\ninstance_ids = ["org__proj-0", "org__proj-2", "org__proj-3", "org__proj-5"]'
            '\ninstance_filter = "[0235]$"\nlimit = 2',
            ["org__proj-0", "org__proj-2"],
        ),
        ('\ninstance_filter = "[35]$"\nlimit = 1', ["org__proj-3"]),
    ],
)
def test_selection_keys_apply_in_order(tmp_path: Path, keys: str, expected: list[str]) -> None:
    import json

    (tmp_path / "i.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(6)))
    text = _with_file(GOOD.replace("reps = 2", "reps = 1"), "i.jsonl", keys)
    campaign = load_campaign(write(tmp_path, text))
    assert [c.instance.instance_id for c in campaign.cells] == expected
    assert campaign.selection.rows == 6 and campaign.selection.selected == len(expected)


def test_every_row_is_validated_even_when_not_selected(tmp_path: Path) -> None:
    import json

    rows = _rows(3)
    del rows[2]["base_commit"]
    (tmp_path / "i.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = _with_file(GOOD, "i.jsonl", "\nlimit = 1")
    with pytest.raises(CampaignError, match=r"i.jsonl:3: instance: .*base_commit"):
        load_campaign(write(tmp_path, text))


def test_duplicate_ids_name_the_second_row(tmp_path: Path) -> None:
    import json

    rows = [*_rows(2), _rows(1)[0]]
    (tmp_path / "i.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(CampaignError, match=r"i\.jsonl:3: instance_id .org__proj-0. appears twice"):
        load_campaign(write(tmp_path, _with_file(GOOD, "i.jsonl")))


def test_a_filter_that_matches_nothing_exits_2(tmp_path: Path) -> None:
    import json

    home = tmp_path / "home"
    assert arenad(home, "init").returncode == 0
    (tmp_path / "i.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(3)))
    text = _with_file(GOOD, "i.jsonl", '\ninstance_filter = "^astropy__"')
    result = arenad(home, "submit", str(write(tmp_path, text)))
    assert result.returncode == 2
    assert "the selection keeps no instance (instance_filter '^astropy__' matched none of 3" in (
        result.stderr
    )
    assert len(result.stderr.strip().splitlines()) == 1
    assert arenad(home, "events", "--json").stdout == ""


def test_an_empty_excludes_list_is_refused_in_one_line(tmp_path: Path) -> None:
    # The reference's loadExcludes throws on an empty list: the test files would be in the patch.
    path = write(tmp_path, GOOD.replace('name = "c1"', 'name = "c1"\nexcludes = []'))
    with pytest.raises(CampaignError) as err:
        load_campaign(path)
    assert str(err.value) == f"{path}: excludes must name at least one pattern"
    home = tmp_path / "home"
    assert arenad(home, "init").returncode == 0
    out = arenad(home, "submit", str(path))
    assert out.returncode == 2
    assert out.stderr == f"arenad: {path}: excludes must name at least one pattern\n"
    assert arenad(home, "events", "--json").stdout == ""  # nothing appended
    one = GOOD.replace('name = "c1"', 'name = "c1"\nexcludes = ["tests/**"]')
    assert load_campaign(write(tmp_path, one)).cells[0].excludes == ["tests/**"]


SUPERVISOR_ARM = GOOD.replace(
    'kind = "solo"\nmodel = "p/m"',
    'kind = "supervisor"\nworker_model = "w"\ndriver_model = "d"\nloops_repo = "./loops"',
)


def _loops_checkout(tmp_path: Path) -> Path:
    loops = tmp_path / "loops"
    for rel in ("scripts/run-supervisor.mjs", "extensions/pi/loops.ts"):
        (loops / rel).parent.mkdir(parents=True, exist_ok=True)
        (loops / rel).write_text("")
    return loops


@pytest.mark.parametrize(
    ("remove", "extra", "message"),
    [
        ("", "", None),
        (".", "", "loops_repo {loops}: no such directory"),
        (
            "scripts/run-supervisor.mjs",
            "",
            "shim_path {loops}/scripts/run-supervisor.mjs: no such file",
        ),
        (
            "extensions/pi/loops.ts",
            "",
            "extension_path {loops}/extensions/pi/loops.ts: no such file",
        ),
        # Given explicitly: checked even when the driver command does not name it.
        (
            "",
            'shim_path = "./nope.mjs"\ndriver_cmd = ["true"]',
            "shim_path {tmp}/nope.mjs: no such file",
        ),
        # Defaulted and not named by the driver: not needed, not checked.
        ("scripts/run-supervisor.mjs", 'driver_cmd = ["node", "{extension}"]', None),
    ],
)
def test_the_supervisor_s_paths_are_checked_at_submit(
    tmp_path: Path, remove: str, extra: str, message: str | None
) -> None:
    loops = _loops_checkout(tmp_path)
    if remove == ".":
        shutil.rmtree(loops)
    elif remove:
        (loops / remove).unlink()
    text = SUPERVISOR_ARM + extra + "\n"
    path = write(tmp_path, text)
    if message is None:
        arm = load_campaign(path).cells[0].arm
        assert isinstance(arm, SupervisorArm) and arm.loops_repo == str(loops)
        return
    expected = f"{path}: arms[0]: arm 'SOLO': " + message.format(loops=loops, tmp=tmp_path)
    with pytest.raises(CampaignError) as err:
        load_campaign(path)
    assert str(err.value) == expected


def test_the_sandbox_is_on_by_default_and_none_is_an_explicit_opt_out(tmp_path: Path) -> None:
    cell = load_campaign(write(tmp_path, GOOD)).cells[0]
    assert cell.sandbox.kind == "bwrap" and cell.sandbox.read_only == []
    (tmp_path / "data").mkdir()
    shared = GOOD + '[sandbox]\nread_only = ["./data"]\n'
    cell = load_campaign(write(tmp_path, shared)).cells[0]
    assert cell.sandbox.read_only == [str((tmp_path / "data").resolve())]
    cell = load_campaign(write(tmp_path, GOOD + '[sandbox]\nkind = "none"\n')).cells[0]
    assert cell.sandbox.kind == "none"


def test_a_docker_sandbox_names_its_image_and_workdir(tmp_path: Path) -> None:
    table = '[sandbox]\nkind = "docker"\nimage = "img:1"\nworkdir = "/src/app"\n'
    cell = load_campaign(write(tmp_path, GOOD + table)).cells[0]
    assert (cell.sandbox.kind, cell.sandbox.image, cell.sandbox.workdir) == (
        "docker",
        "img:1",
        "/src/app",
    )
    bad = GOOD + '[sandbox]\nkind = "docker"\nworkdir = "src"\n'
    with pytest.raises(CampaignError, match=r"\[sandbox\] workdir 'src' must be an absolute"):
        load_campaign(write(tmp_path, bad))
    # On Ray too: each node runs its cells' containers on its own engine (issue 30).
    on_ray = GOOD + '[executor]\nkind = "ray"\n[sandbox]\nkind = "docker"\n'
    cell = load_campaign(write(tmp_path, on_ray)).cells[0]
    assert cell.sandbox.kind == "docker" and cell.executor is not None
    assert cell.executor.kind == "ray"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('kind = "podman"', "Invalid enum value 'podman' - at `sandbox.kind`"),
        (
            'kind = "docker"\n[gateway]\nkind = "none"',
            '[sandbox] kind = "docker" takes [secrets] only when every model-using arm calls'
            " through the gateway",
        ),
        ('image = "img:1"', '[sandbox] image is for kind = "docker" only'),
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


def test_a_docker_sandbox_takes_secrets_that_only_the_gateway_reads(tmp_path: Path) -> None:
    # The solo arm's calls go through the gateway, which reads the keys from the env files:
    # the agent in its container holds only its attempt's token, no wrapper is needed.
    (tmp_path / "secrets").mkdir()
    text = GOOD + '[secrets]\ndir = "./secrets"\nenv_files = [".env"]\n'
    cell = load_campaign(write(tmp_path, text + '[sandbox]\nkind = "docker"\n')).cells[0]
    assert (cell.sandbox.kind, cell.gateway.kind) == ("docker", "gateway")
    assert cell.secrets is not None


def test_verify_in_defaults_to_the_checkout_and_workspace_is_a_choice(tmp_path: Path) -> None:
    assert load_campaign(write(tmp_path, GOOD)).cells[0].verify_in == "checkout"
    text = GOOD.replace("[materializer]", '[verify]\nverify_in = "workspace"\n[materializer]')
    assert load_campaign(write(tmp_path, text)).cells[0].verify_in == "workspace"
    bad = GOOD.replace("[materializer]", '[verify]\nverify_in = "ws"\n[materializer]')
    with pytest.raises(CampaignError, match="verify_in"):
        load_campaign(write(tmp_path, bad))


TOOL_ARM = """[[arms]]
name = "TOOL"
kind = "command"
argv = ["true"]
uses_model = false
"""


def test_the_network_defaults_per_arm_and_a_given_one_applies_to_all(tmp_path: Path) -> None:
    """Model for an arm that uses a model, none for one that does not; the campaign's
    sandbox says the most open (what submit checks this machine can make)."""
    campaign = load_campaign(write(tmp_path, GOOD + TOOL_ARM))
    assert {c.arm.name: c.sandbox.network for c in campaign.cells} == {
        "SOLO": "model",
        "TOOL": "none",
    }
    assert campaign.sandbox.network == "model"
    only_tool = GOOD.split("[[arms]]")[0] + TOOL_ARM
    assert load_campaign(write(tmp_path, only_tool)).sandbox.network == "none"
    given = load_campaign(write(tmp_path, GOOD + TOOL_ARM + '[sandbox]\nnetwork = "host"\n'))
    assert {c.sandbox.network for c in given.cells} == {"host"}
    assert given.sandbox.network == "host"
    with pytest.raises(CampaignError, match=r"Invalid enum value 'lan' - at `sandbox.network`"):
        load_campaign(write(tmp_path, GOOD + '[sandbox]\nnetwork = "lan"\n'))


def test_the_gateway_is_the_default_for_solo_arms_and_none_opts_out(tmp_path: Path) -> None:
    from events.specs import GatewaySpec

    cells = load_campaign(write(tmp_path, GOOD)).cells
    assert [c.gateway for c in cells] == [GatewaySpec(kind="gateway")] * 2
    text = GOOD.replace("reps = 2", 'reps = 1\n[gateway]\nkind = "none"')
    assert load_campaign(write(tmp_path, text)).cells[0].gateway.kind == "none"
    capped = GOOD.replace("reps = 2", "reps = 1\n[gateway]\nmax_usd = 1.5\nmax_tokens = 9")
    assert load_campaign(write(tmp_path, capped)).cells[0].gateway == GatewaySpec(
        kind="gateway", max_usd=1.5, max_tokens=9
    )
    # A command arm that uses a model is pointed at it too (issue 31); one that does not
    # has no model calls, and its cells record none.
    command = GOOD.replace('kind = "solo"\nmodel = "p/m"', 'kind = "command"\nargv = ["true"]')
    assert load_campaign(write(tmp_path, command)).cells[0].gateway.kind == "gateway"
    offline = command.replace('argv = ["true"]', 'argv = ["true"]\nuses_model = false')
    assert load_campaign(write(tmp_path, offline)).cells[0].gateway.kind == "none"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("max_usd = 0", "[gateway] max_usd = 0"),
        ("max_usd = inf", "[gateway] max_usd = inf"),
        ("max_tokens = 0", "[gateway] max_tokens = 0"),
        ('kind = "proxy"', "gateway"),
    ],
)
def test_bad_gateway_tables_say_what_and_where(tmp_path: Path, table: str, message: str) -> None:
    path = write(tmp_path, GOOD.replace("reps = 2", f"reps = 1\n[gateway]\n{table}"))
    with pytest.raises(CampaignError) as err:
        load_campaign(path)
    assert message in str(err.value) and str(path) in str(err.value)
