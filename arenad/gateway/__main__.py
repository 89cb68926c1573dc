import sys

from arenad.gateway.server import main

sys.exit(main())
