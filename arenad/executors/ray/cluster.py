"""Ray's token auth for this process, and a one-machine cluster for ``arenad demo``.

Token auth in Ray 2.60 (``notes/ray-findings.md`` §1): the mode comes only from the
environment (``RAY_AUTH_MODE=token``) and the token from ``RAY_AUTH_TOKEN`` or the file
``RAY_AUTH_TOKEN_PATH`` names; it never travels, so every node and every driver needs it,
and ``import ray`` reads the mode once — a process that sets it later has Ray read it again.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray

DEMO_OBJECT_STORE_BYTES = 80 * 1024 * 1024


def use_token(path: Path) -> None:
    """Token auth with the token in ``path`` (made, mode 0600, if missing) for this process
    and the Ray processes it starts."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(path)
    os.environ.pop("RAY_AUTH_TOKEN", None)
    # `import ray` read the mode already; read it again, and drop a cached token, as
    # Ray's own enabling of token auth does.
    import importlib

    raylet: Any = importlib.import_module("ray._raylet")  # compiled: no stubs for these
    raylet.Config.initialize("")
    raylet.AuthenticationTokenLoader.instance().reset_cache()


@contextlib.contextmanager
def local_cluster(token_path: Path, *, slots: int, namespace: str) -> Iterator[str]:
    """A Ray cluster of this machine alone, started by this process (a head with no CPU
    for Ray's own work, offering ``slots`` cells) and stopped on the way out: only its own
    processes (never ``ray stop``, which would end every Ray process of the machine)."""
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    use_token(token_path)
    try:
        context = ray.init(
            num_cpus=0,
            resources={"arenad_slot": slots},
            include_dashboard=False,
            object_store_memory=DEMO_OBJECT_STORE_BYTES,
            namespace=namespace,
            log_to_driver=False,
        )
        try:
            yield str(context.address_info["address"])  # type: ignore[attr-defined]
        finally:
            ray.shutdown()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
