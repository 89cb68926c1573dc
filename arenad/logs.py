"""Human logs go to stderr; the event log is the record."""

from __future__ import annotations

import logging
import sys


def setup_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("arenad")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
