"""The application layer: the one door the CLI imports, one function per command.

Services open the store, do one thing and return data; ``cli.py`` prints it. What sits
behind a service (the daemon, the ledger, the scripted model) is imported when the
service is first used, so a quick command (``status``) does not pay for loading the
daemon: names resolve lazily through :func:`__getattr__` (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arenad.app.artifacts import export_artifacts
    from arenad.app.campaigns import campaigns, set_budget
    from arenad.app.control import (
        CONTROL_WHERE,
        RETRY_WHERE,
        abort_cell,
        control_campaign,
        pause_cell,
        resume_cell,
        retry_campaign,
        retry_cell,
        set_max_parallel,
    )
    from arenad.app.demo import run_demo
    from arenad.app.executors import serve_daemon
    from arenad.app.log import (
        events,
        history,
        init_home,
        list_migrations,
        migrate,
        rebuild,
        status,
        verify_log,
    )
    from arenad.app.reverify import diff_lines as reverify_lines
    from arenad.app.reverify import reverify
    from arenad.app.submit import submit_campaign
    from arenad.app.views import (
        campaigns_table,
        history_lines,
        recorded_to_json,
        status_table,
        submit_lines,
    )
    from arenad.cell.retry import RetryPolicy
    from arenad.daemon.daemon import DaemonOptions, run_daemon
    from arenad.errors import ArenadError, StoreError, UserError
    from arenad.export.service import FORMATS as EXPORT_FORMATS
    from arenad.export.service import export
    from arenad.home import Home, resolve_home
    from arenad.ledger.project import stats_json
    from arenad.ledger.service import project_ledger, record_verdict
    from arenad.logs import setup_logging
    from arenad.proposer.service import capture_proposer_shots
    from arenad.report.render import json_bytes as report_json
    from arenad.report.service import print_terminal as print_report
    from arenad.report.service import report
    from arenad.scripted_model.server import serve as serve_scripted_model
    from arenad.terminal import json_printable, printable
    from arenad.view.service import serve_view

# name -> (module, attribute)
_EXPORTS: dict[str, tuple[str, str]] = {
    **{
        name: ("arenad.app.control", name)
        for name in (
            "CONTROL_WHERE",
            "RETRY_WHERE",
            "abort_cell",
            "control_campaign",
            "pause_cell",
            "resume_cell",
            "retry_campaign",
            "retry_campaign",
            "retry_cell",
            "set_max_parallel",
        )
    },
    **{name: ("arenad.app.campaigns", name) for name in ("campaigns", "set_budget")},
    **{
        name: ("arenad.app.log", name)
        for name in (
            "events",
            "history",
            "init_home",
            "list_migrations",
            "migrate",
            "rebuild",
            "status",
            "verify_log",
        )
    },
    **{
        name: ("arenad.app.views", name)
        for name in (
            "campaigns_table",
            "history_lines",
            "recorded_to_json",
            "status_table",
            "submit_lines",
        )
    },
    **{name: ("arenad.errors", name) for name in ("ArenadError", "StoreError", "UserError")},
    **{name: ("arenad.home", name) for name in ("Home", "resolve_home")},
    **{name: ("arenad.ledger.service", name) for name in ("project_ledger", "record_verdict")},
    "export_artifacts": ("arenad.app.artifacts", "export_artifacts"),
    "export": ("arenad.export.service", "export"),
    "EXPORT_FORMATS": ("arenad.export.service", "FORMATS"),
    "run_demo": ("arenad.app.demo", "run_demo"),
    "serve_daemon": ("arenad.app.executors", "serve_daemon"),
    "submit_campaign": ("arenad.app.submit", "submit_campaign"),
    "reverify": ("arenad.app.reverify", "reverify"),
    "reverify_lines": ("arenad.app.reverify", "diff_lines"),
    "RetryPolicy": ("arenad.cell.retry", "RetryPolicy"),
    "DaemonOptions": ("arenad.daemon.daemon", "DaemonOptions"),
    "run_daemon": ("arenad.daemon.daemon", "run_daemon"),
    "stats_json": ("arenad.ledger.project", "stats_json"),
    "setup_logging": ("arenad.logs", "setup_logging"),
    "capture_proposer_shots": ("arenad.proposer.service", "capture_proposer_shots"),
    "report": ("arenad.report.service", "report"),
    "print_report": ("arenad.report.service", "print_terminal"),
    "report_json": ("arenad.report.render", "json_bytes"),
    "serve_scripted_model": ("arenad.scripted_model.server", "serve"),
    "serve_view": ("arenad.view.service", "serve_view"),
    "printable": ("arenad.terminal", "printable"),
    "json_printable": ("arenad.terminal", "json_printable"),
}

__all__ = [
    "CONTROL_WHERE",
    "EXPORT_FORMATS",
    "RETRY_WHERE",
    "ArenadError",
    "DaemonOptions",
    "Home",
    "RetryPolicy",
    "StoreError",
    "UserError",
    "abort_cell",
    "campaigns",
    "campaigns_table",
    "capture_proposer_shots",
    "control_campaign",
    "events",
    "export",
    "export_artifacts",
    "history",
    "history_lines",
    "init_home",
    "json_printable",
    "list_migrations",
    "migrate",
    "pause_cell",
    "print_report",
    "printable",
    "project_ledger",
    "rebuild",
    "record_verdict",
    "recorded_to_json",
    "report",
    "report_json",
    "resolve_home",
    "resume_cell",
    "retry_campaign",
    "retry_cell",
    "reverify",
    "reverify_lines",
    "run_daemon",
    "run_demo",
    "serve_daemon",
    "serve_scripted_model",
    "serve_view",
    "set_budget",
    "set_max_parallel",
    "setup_logging",
    "stats_json",
    "status",
    "status_table",
    "submit_campaign",
    "submit_lines",
    "verify_log",
]


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'arenad.app' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # once resolved, a plain attribute
    return value
