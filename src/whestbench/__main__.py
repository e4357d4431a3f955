"""``python -m whestbench``: the same CLI as ``whest``."""

import sys

from whestbench.cli import main

sys.exit(main())
