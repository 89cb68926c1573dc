"""arenad.app is the CLI's one door: every name it exports resolves, lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

import arenad.app as app


@pytest.mark.parametrize("name", app.__all__)
def test_every_export_resolves(name: str) -> None:
    assert getattr(app, name) is not None


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = app.nope  # type: ignore[attr-defined]


def test_importing_the_cli_does_not_load_the_daemon() -> None:
    # `arenad status` must not pay for the daemon, the ledger or the scripted model.
    code = (
        "import sys, cli; heavy = [m for m in ('arenad.daemon.daemon', 'arenad.ledger.service',"
        " 'arenad.scripted_model.server') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
