"""arenad.sandbox.cellenv: the isolated cell environment (the reference's
prepareIsolatedCellEnvironment)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import msgspec

from arenad.sandbox.cellenv import (
    OPENCODE_OFFLINE_FLAGS,
    REMOVED_VARS,
    cell_env,
    cell_paths,
    prepare_cell_env,
)

SENTINEL = "sk-SENTINEL-auth-content-4f1c"


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _ambient(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    home = tmp_path / "ambient-home"
    home.mkdir()
    return home, {"HOME": str(home), "PATH": os.environ["PATH"], "LANG": "C.UTF-8"}


def test_dirs_are_private_and_fresh(tmp_path: Path) -> None:
    _, base = _ambient(tmp_path)
    run = tmp_path / "runs" / "iid" / "SOLO"
    (run / "home").mkdir(parents=True)
    (run / "home" / "leftover").write_text("from an earlier attempt")
    (run / "prompt.txt").write_text("kept")
    cell = prepare_cell_env(run, base)
    p = cell.paths
    for d in p.private_dirs:
        assert os.path.isdir(d) and _mode(d) == 0o700, d
    assert not (run / "home" / "leftover").exists()
    assert (run / "prompt.txt").read_text() == "kept"
    assert _mode(p.opencode_config) == 0o600
    assert p.opencode_config == str(run / "xdg" / "config" / "opencode" / "opencode.json")
    assert cell.opencode_db == str(run / "xdg" / "data" / "opencode" / "opencode.db")
    names = {os.path.relpath(d, run) for d in p.private_dirs}
    assert names >= {"home", "xdg/config", "xdg/data", "xdg/cache", "xdg/state"}
    assert names >= {"xdg/runtime", "tmp", "python-user", "xdg/config/opencode"}


def test_env_points_into_the_run_dir(tmp_path: Path) -> None:
    _, base = _ambient(tmp_path)
    base.update({name: "x" for name in REMOVED_VARS})
    base["OPENCODE_DISABLE_MODELS_FETCH"] = "0"
    run = tmp_path / "run"
    cell = prepare_cell_env(run, base)
    env = cell.env
    assert env["HOME"] == str(run / "home")
    assert env["XDG_CONFIG_HOME"] == str(run / "xdg" / "config")
    assert env["XDG_DATA_HOME"] == str(run / "xdg" / "data")
    assert env["XDG_CACHE_HOME"] == str(run / "xdg" / "cache")
    assert env["XDG_STATE_HOME"] == str(run / "xdg" / "state")
    assert env["XDG_RUNTIME_DIR"] == str(run / "xdg" / "runtime")
    assert env["TMPDIR"] == str(run / "tmp")
    assert env["PYTHONUSERBASE"] == str(run / "python-user")
    assert env["OPENCODE_CONFIG_DIR"] == str(run / "xdg" / "config" / "opencode")
    assert env["OPENCODE_CONFIG"] == cell.paths.opencode_config
    assert env["OPENCODE_DB"] == cell.opencode_db
    # The offline flags are defaults: the user's "0" is kept, the other is set.
    assert env["OPENCODE_DISABLE_MODELS_FETCH"] == "0"
    assert (
        env["OPENCODE_DISABLE_AUTOUPDATE"] == OPENCODE_OFFLINE_FLAGS["OPENCODE_DISABLE_AUTOUPDATE"]
    )
    for name in REMOVED_VARS:
        assert name not in env
    assert env["PATH"] == base["PATH"] and env["LANG"] == "C.UTF-8"


def test_config_from_inline_content_wins(tmp_path: Path) -> None:
    _, base = _ambient(tmp_path)
    other = tmp_path / "other.json"
    other.write_text('{"from": "OPENCODE_CONFIG"}')
    base["OPENCODE_CONFIG"] = str(other)
    base["OPENCODE_CONFIG_CONTENT"] = '{"from": "content"}'
    cell = prepare_cell_env(tmp_path / "run", base)
    assert Path(cell.paths.opencode_config).read_text() == '{"from": "content"}'
    assert cell.config_source == "OPENCODE_CONFIG_CONTENT"
    assert "OPENCODE_CONFIG_CONTENT" not in cell.env


def test_config_from_opencode_config_then_ambient_files(tmp_path: Path) -> None:
    home, base = _ambient(tmp_path)
    ambient_dir = home / ".config" / "opencode"
    ambient_dir.mkdir(parents=True)
    (ambient_dir / "opencode.jsonc").write_text("// jsonc\n{}")
    given = tmp_path / "given.json"
    given.write_text('{"given": true}')

    cell = prepare_cell_env(tmp_path / "r1", {**base, "OPENCODE_CONFIG": f"  {given}  "})
    assert Path(cell.paths.opencode_config).read_text() == '{"given": true}'

    # A missing OPENCODE_CONFIG falls through to the ambient files; .jsonc after .json.
    cell = prepare_cell_env(tmp_path / "r2", {**base, "OPENCODE_CONFIG": str(tmp_path / "no")})
    assert Path(cell.paths.opencode_config).read_text() == "// jsonc\n{}"
    (ambient_dir / "opencode.json").write_text('{"json": 1}')
    cell = prepare_cell_env(tmp_path / "r3", base)
    assert Path(cell.paths.opencode_config).read_text() == '{"json": 1}'
    assert cell.config_source == str(ambient_dir / "opencode.json")

    # XDG_CONFIG_HOME of the ambient env replaces ~/.config.
    xdg = tmp_path / "xdg-config"
    (xdg / "opencode").mkdir(parents=True)
    (xdg / "opencode" / "opencode.json").write_text('{"xdg": 1}')
    cell = prepare_cell_env(tmp_path / "r4", {**base, "XDG_CONFIG_HOME": str(xdg)})
    assert Path(cell.paths.opencode_config).read_text() == '{"xdg": 1}'


def test_config_defaults_to_empty_object(tmp_path: Path) -> None:
    _, base = _ambient(tmp_path)
    cell = prepare_cell_env(tmp_path / "run", base)
    assert Path(cell.paths.opencode_config).read_text() == "{}\n"
    assert cell.config_source == "default"


def test_config_copy_survives_a_base_env_that_points_into_the_run_dir(tmp_path: Path) -> None:
    _, base = _ambient(tmp_path)
    run = tmp_path / "run"
    first = prepare_cell_env(run, {**base, "OPENCODE_CONFIG_CONTENT": '{"a": 1}'})
    again = prepare_cell_env(run, first.env)
    assert Path(again.paths.opencode_config).read_text() == '{"a": 1}'


def test_auth_file_is_named_never_read(tmp_path: Path) -> None:
    home, base = _ambient(tmp_path)
    auth = home / ".local" / "share" / "opencode" / "auth.json"
    auth.parent.mkdir(parents=True)
    auth.write_text(f'{{"p": {{"type": "api", "key": "{SENTINEL}"}}}}')
    run = tmp_path / "run"
    cell = prepare_cell_env(run, {**base, "OPENCODE_AUTH_CONTENT": SENTINEL})
    assert cell.env["SWE_ARENA_OPENCODE_AUTH_FILE"] == str(auth)
    assert SENTINEL not in msgspec.json.encode(cell).decode()
    for path in run.rglob("*"):
        if path.is_file():
            assert SENTINEL not in path.read_text(errors="replace")

    data_home = tmp_path / "xdg-data"
    cell = prepare_cell_env(tmp_path / "r2", {**base, "XDG_DATA_HOME": str(data_home)})
    assert cell.env["SWE_ARENA_OPENCODE_AUTH_FILE"] == str(data_home / "opencode" / "auth.json")
    cell = prepare_cell_env(tmp_path / "r3", {**base, "SWE_ARENA_OPENCODE_AUTH_FILE": " /a.json "})
    assert cell.env["SWE_ARENA_OPENCODE_AUTH_FILE"] == "/a.json"


def test_cell_env_is_pure_and_uses_fallback_home() -> None:
    paths = cell_paths("/runs/x/SOLO")
    base = {"PYTHONPATH": "/daemon/site", "KEEP": "1"}
    env = cell_env(paths, base, fallback_home="/home/someone")
    assert base == {"PYTHONPATH": "/daemon/site", "KEEP": "1"}
    assert env["KEEP"] == "1" and "PYTHONPATH" not in env
    assert env["HOME"] == "/runs/x/SOLO/home"
    assert env["SWE_ARENA_OPENCODE_AUTH_FILE"] == ("/home/someone/.local/share/opencode/auth.json")
    assert env["OPENCODE_DB"] == "/runs/x/SOLO/xdg/data/opencode/opencode.db"
