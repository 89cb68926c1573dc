"""The isolated cell environment (the reference's prepareIsolatedCellEnvironment).

Each cell gets private CLI state, caches, temp files and Python installs under its run dir:
HOME, the XDG base dirs, XDG_RUNTIME_DIR, TMPDIR and PYTHONUSERBASE all point there (mode
0700, recreated fresh), opencode reads its own copy of the ambient config and keeps its store
at ``<run>/xdg/data/opencode/opencode.db``. The ambient opencode auth file is passed on by
*name* only (SWE_ARENA_OPENCODE_AUTH_FILE); its content is read inside the secrets wrapper's
child, never here.

``cell_paths`` and ``cell_env`` are pure (base env in, env out); ``prepare_cell_env`` does
the I/O: it creates the dirs and writes the config copy.
"""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Callable, Mapping

import msgspec

# Removed from the cell env: Python must not see the daemon's interpreter setup, and inline
# opencode config/auth would bypass the cell's own copies.
REMOVED_VARS: tuple[str, ...] = (
    "OPENCODE_CONFIG_CONTENT",
    "OPENCODE_AUTH_CONTENT",
    "PYTHONHOME",
    "PYTHONPATH",
    "PYTHONNOUSERSITE",
)

# Set in addition to the reference (facts/opencode.md §4-5): no models.dev refresh, no update check.
OPENCODE_OFFLINE_FLAGS: dict[str, str] = {
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
}

DEFAULT_CONFIG_TEXT = "{}\n"
PRIVATE_DIR_MODE = 0o700
CONFIG_FILE_MODE = 0o600


class CellPaths(msgspec.Struct, frozen=True, kw_only=True):
    run_dir: str
    home: str
    xdg_root: str
    config_home: str
    data_home: str
    cache_home: str
    state_home: str
    runtime_dir: str
    tmp: str
    python_user_base: str
    opencode_config_dir: str
    opencode_config: str
    opencode_db: str

    @property
    def managed_roots(self) -> tuple[str, ...]:
        """Removed and recreated on every prepare."""
        return (self.home, self.xdg_root, self.tmp, self.python_user_base)

    @property
    def private_dirs(self) -> tuple[str, ...]:
        """Created with mode 0700."""
        return (
            self.home,
            self.xdg_root,
            self.config_home,
            self.data_home,
            self.cache_home,
            self.state_home,
            self.runtime_dir,
            self.tmp,
            self.python_user_base,
            self.opencode_config_dir,
        )


class CellEnv(msgspec.Struct, frozen=True, kw_only=True):
    env: dict[str, str]
    opencode_db: str
    paths: CellPaths
    # Where the config copy came from: "OPENCODE_CONFIG_CONTENT", a file path, or "default".
    config_source: str


def cell_paths(run_dir: str | os.PathLike[str]) -> CellPaths:
    """The cell's private paths under ``run_dir`` (made absolute, not resolved)."""
    root = os.path.abspath(os.fspath(run_dir))
    xdg = os.path.join(root, "xdg")
    config_home = os.path.join(xdg, "config")
    data_home = os.path.join(xdg, "data")
    opencode_config_dir = os.path.join(config_home, "opencode")
    return CellPaths(
        run_dir=root,
        home=os.path.join(root, "home"),
        xdg_root=xdg,
        config_home=config_home,
        data_home=data_home,
        cache_home=os.path.join(xdg, "cache"),
        state_home=os.path.join(xdg, "state"),
        runtime_dir=os.path.join(xdg, "runtime"),
        tmp=os.path.join(root, "tmp"),
        python_user_base=os.path.join(root, "python-user"),
        opencode_config_dir=opencode_config_dir,
        opencode_config=os.path.join(opencode_config_dir, "opencode.json"),
        opencode_db=os.path.join(data_home, "opencode", "opencode.db"),
    )


def _trimmed(env: Mapping[str, str], name: str) -> str:
    return (env.get(name) or "").strip()


def ambient_home(base_env: Mapping[str, str], fallback_home: str) -> str:
    return _trimmed(base_env, "HOME") or fallback_home


def config_candidates(base_env: Mapping[str, str], fallback_home: str) -> list[str]:
    """Files the config copy is read from, in order (after OPENCODE_CONFIG_CONTENT)."""
    home = ambient_home(base_env, fallback_home)
    config_home = _trimmed(base_env, "XDG_CONFIG_HOME") or os.path.join(home, ".config")
    candidates = [
        _trimmed(base_env, "OPENCODE_CONFIG"),
        os.path.join(config_home, "opencode", "opencode.json"),
        os.path.join(config_home, "opencode", "opencode.jsonc"),
    ]
    return [c for c in candidates if c]


def ambient_auth_file(base_env: Mapping[str, str], fallback_home: str) -> str:
    """The ambient opencode auth.json path (a name only: never opened here)."""
    given = _trimmed(base_env, "SWE_ARENA_OPENCODE_AUTH_FILE")
    if given:
        return given
    home = ambient_home(base_env, fallback_home)
    data_home = _trimmed(base_env, "XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    return os.path.join(data_home, "opencode", "auth.json")


def cell_env(
    paths: CellPaths, base_env: Mapping[str, str], *, fallback_home: str
) -> dict[str, str]:
    """The cell's environment: ``base_env`` with the private paths set and REMOVED_VARS gone.

    ``fallback_home`` stands in for the ambient home when ``base_env`` has no HOME (the reference
    uses the OS's idea of the user's home).
    """
    env = dict(base_env)
    env.update(
        {
            "HOME": paths.home,
            "XDG_CONFIG_HOME": paths.config_home,
            "XDG_DATA_HOME": paths.data_home,
            "XDG_CACHE_HOME": paths.cache_home,
            "XDG_STATE_HOME": paths.state_home,
            "XDG_RUNTIME_DIR": paths.runtime_dir,
            "TMPDIR": paths.tmp,
            "OPENCODE_CONFIG_DIR": paths.opencode_config_dir,
            "OPENCODE_CONFIG": paths.opencode_config,
            "OPENCODE_DB": paths.opencode_db,
            "SWE_ARENA_OPENCODE_AUTH_FILE": ambient_auth_file(base_env, fallback_home),
            "PYTHONUSERBASE": paths.python_user_base,
        }
    )
    # Defaults only: a value the user exported (even "0") wins, as in the reference,
    # which sets neither flag.
    for name, value in OPENCODE_OFFLINE_FLAGS.items():
        env.setdefault(name, value)
    for name in REMOVED_VARS:
        env.pop(name, None)
    return env


def resolve_config_text(
    base_env: Mapping[str, str],
    *,
    fallback_home: str,
    read: Callable[[str], bytes | None],
) -> tuple[bytes, str]:
    """(config bytes, source): OPENCODE_CONFIG_CONTENT if set (even empty, as the reference),
    else the first readable candidate file, else ``{}``."""
    inline = base_env.get("OPENCODE_CONFIG_CONTENT")
    if inline is not None:
        return inline.encode("utf-8"), "OPENCODE_CONFIG_CONTENT"
    for candidate in config_candidates(base_env, fallback_home):
        data = read(candidate)
        if data is not None:
            return data, candidate
    return DEFAULT_CONFIG_TEXT.encode("utf-8"), "default"


def _read_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _os_home() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return os.path.expanduser("~")


def cell_env_for(
    run_dir: str | os.PathLike[str], base_env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The env of an already prepared cell (same home rule as ``prepare_cell_env``)."""
    base = dict(os.environ if base_env is None else base_env)
    return cell_env(cell_paths(run_dir), base, fallback_home=_os_home())


def prepare_cell_env(
    run_dir: str | os.PathLike[str],
    base_env: Mapping[str, str] | None = None,
) -> CellEnv:
    """Create the cell's private dirs fresh, copy the opencode config, and return the env.

    The config is read *before* the managed dirs are removed, so a base env that already
    points into this run dir still yields its config rather than ``{}``.
    """
    base = dict(os.environ if base_env is None else base_env)
    fallback_home = _os_home()
    paths = cell_paths(run_dir)
    config, source = resolve_config_text(base, fallback_home=fallback_home, read=_read_file)

    os.makedirs(paths.run_dir, exist_ok=True)
    for root in paths.managed_roots:
        if os.path.islink(root) or os.path.isfile(root):
            os.unlink(root)
        elif os.path.exists(root):
            shutil.rmtree(root)
    for d in paths.private_dirs:
        os.makedirs(d, mode=PRIVATE_DIR_MODE, exist_ok=True)
        os.chmod(d, PRIVATE_DIR_MODE)

    fd = os.open(paths.opencode_config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, CONFIG_FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(config)
    os.chmod(paths.opencode_config, CONFIG_FILE_MODE)

    return CellEnv(
        env=cell_env(paths, base, fallback_home=fallback_home),
        opencode_db=paths.opencode_db,
        paths=paths,
        config_source=source,
    )
