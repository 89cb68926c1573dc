"""Human logs go to stderr; the event log is the record.

A log line can carry what an agent wrote (a failure reason from its stderr, a path): the
formatter escapes control characters in the whole record, traceback included
(:func:`arenad.terminal.printable`), so the daemon's log never drives the terminal it is
read on."""

from __future__ import annotations

import logging
import sys

from arenad.terminal import printable


class PrintableFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record), newlines=True)


def setup_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(PrintableFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("arenad")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
