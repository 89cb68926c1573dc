"""Where the gateway of a daemon home keeps its socket, port, pid, grants and journal."""

from __future__ import annotations

import hashlib
from pathlib import Path

GATEWAY_DIR = "gateway"


def gateway_dir(home: Path) -> Path:
    return home / GATEWAY_DIR


def model_endpoint(home: Path) -> Path:
    """The gateway's unix socket: what a cell's model port is forwarded to."""
    return gateway_dir(home) / "gw.sock"


def port_file(home: Path) -> Path:
    """The TCP port on 127.0.0.1 (for agents that need TCP), written once bound."""
    return gateway_dir(home) / "port"


def pid_file(home: Path) -> Path:
    """``<pid> <start ticks>`` of the running gateway (how a restarted daemon adopts it)."""
    return gateway_dir(home) / "pid"


def log_file(home: Path) -> Path:
    return gateway_dir(home) / "gateway.log"


def calls_dir(home: Path) -> Path:
    return gateway_dir(home) / "calls"


def attempt_journal(home: Path, campaign: str, cell_id: str, attempt: int) -> Path:
    """One JSON line per finished call of one cell attempt: what the daemon ingests by
    offsets into that attempt's ingest stream (source ``gateway``). Named by a digest of
    the attempt, so any cell id makes a plain file name."""
    key = f"{campaign}\0{cell_id}\0{attempt}".encode()
    return calls_dir(home) / f"{hashlib.sha256(key).hexdigest()[:32]}.jsonl"


def grants_dir(home: Path) -> Path:
    """One file per attempt credential, named by the credential's sha256 (never the token)."""
    return gateway_dir(home) / "grants"
