"""The [sandbox] limit keys: defaults, human sizes, "unlimited", and refusals that name
the key (exit 2 through the CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from arenad.campaign import load_campaign
from arenad.errors import CampaignError
from tests.campaign.test_load import GOOD, arenad, write


def test_a_campaign_without_limits_gets_the_shared_box_defaults(tmp_path: Path) -> None:
    sandbox = load_campaign(write(tmp_path, GOOD)).cells[0].sandbox
    assert sandbox.memory_bytes == 4 << 30
    assert sandbox.pids == 1024
    assert sandbox.cpus == 2.0
    assert sandbox.disk_bytes == 10 << 30


@pytest.mark.parametrize(
    ("table", "memory", "pids", "cpus", "disk"),
    [
        ('memory = "512MiB"\ndisk = "1.5G"', 512 << 20, 1024, 2.0, 3 << 29),
        ('memory = "2GB"\npids = 64\ncpus = 0.5', 2 * 1000**3, 64, 0.5, 10 << 30),
        ("memory = 67108864\ndisk = 2097152", 64 << 20, 1024, 2.0, 2 << 20),
        (
            'memory = "unlimited"\npids = "unlimited"\ncpus = "unlimited"\ndisk = "unlimited"',
            None,
            None,
            None,
            None,
        ),
    ],
)
def test_limits_read_human_sizes(
    tmp_path: Path,
    table: str,
    memory: int | None,
    pids: int | None,
    cpus: float | None,
    disk: int | None,
) -> None:
    sandbox = load_campaign(write(tmp_path, GOOD + f"[sandbox]\n{table}\n")).cells[0].sandbox
    assert (sandbox.memory_bytes, sandbox.pids, sandbox.cpus, sandbox.disk_bytes) == (
        memory,
        pids,
        cpus,
        disk,
    )


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('memory = "lots"', "[sandbox] memory"),
        ('memory = "4 parsecs"', "[sandbox] memory"),
        ('memory = "4M"', "[sandbox] memory"),
        ("memory = true", "sandbox.memory"),
        ("pids = 2", "[sandbox] pids"),
        ("pids = 1.5", "sandbox.pids"),
        ('pids = "many"', "[sandbox] pids"),
        ("cpus = 0", "[sandbox] cpus"),
        ('cpus = "nan"', "[sandbox] cpus"),
        ("cpus = nan", "[sandbox] cpus"),
        ('disk = "-1G"', "[sandbox] disk"),
    ],
)
def test_a_bad_limit_names_its_key(tmp_path: Path, table: str, key: str) -> None:
    with pytest.raises(CampaignError) as info:
        load_campaign(write(tmp_path, GOOD + f"[sandbox]\n{table}\n"))
    assert key in str(info.value) and str(tmp_path / "c.toml") in str(info.value)


def test_a_bad_limit_through_the_cli_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + '[sandbox]\nmemory = "lots"\n')
    home = tmp_path / "home"
    assert arenad(home, "init").returncode == 0
    result = arenad(home, "submit", str(path))
    assert result.returncode == 2, result.stderr
    assert "[sandbox] memory" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert arenad(home, "events", "--json").stdout == ""
