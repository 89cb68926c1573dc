"""Proposer shots: capture receipts and the Claude Code transcripts of their worktrees as
events, live (``ProposerShotWatcher``) or once (``scan_once``).

``layout`` (names and streams) is pure and imported by the ledger; ``capture`` does the
file I/O. Nothing here knows the ledger.
"""
