"""``python -m arenad.gateway``: the gateway process (arenad.gateway.process starts it)."""

import sys

from arenad.gateway.server import main

# Guarded: walking the package's modules (tests/test_errors.py) imports this one too.
if __name__ == "__main__":
    sys.exit(main())
