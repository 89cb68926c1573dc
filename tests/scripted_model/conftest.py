"""Make the opencode fixtures visible to these tests.

tests/conftest.py is to register ``tests.opencode_support`` as a plugin for the whole suite;
re-exporting its fixtures here as well is harmless (a conftest definition simply takes
precedence for this directory) and keeps this directory runnable on its own.
"""

from tests.opencode_support import opencode_bin, scripted_model

__all__ = ["opencode_bin", "scripted_model"]
