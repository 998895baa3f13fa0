"""python -m alloclab: the command line (see alloclab.cli)."""

import sys

from .cli import main

sys.exit(main())
