"""The application layer: one function per command; the CLI imports only this package."""

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

__all__ = [
    "events",
    "history",
    "init_home",
    "list_migrations",
    "migrate",
    "rebuild",
    "status",
    "verify_log",
]
