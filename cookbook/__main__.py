"""``python -m cookbook``: the same command line as the ``cookbook`` script."""

import sys

from cookbook.harness import main

sys.exit(main())
