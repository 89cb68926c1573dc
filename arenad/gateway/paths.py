"""Where the gateway of a daemon home keeps its socket, port, pid, grants and journal."""

from __future__ import annotations

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


def journal(home: Path) -> Path:
    """One JSON line per finished call: what the daemon ingests by offsets."""
    return gateway_dir(home) / "calls.jsonl"


def grants_dir(home: Path) -> Path:
    """One file per attempt credential, named by the credential's sha256 (never the token)."""
    return gateway_dir(home) / "grants"
