"""arenad: run coding-agent evaluation arenas durably, from an append-only event log."""

__version__ = "0.1.0"
