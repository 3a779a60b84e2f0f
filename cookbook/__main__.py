"""``python -m cookbook``: the same command line as the ``cookbook`` script."""

import sys

from cookbook.cli import main

sys.exit(main())
