"""python -m alloclab: the command line (see alloclab.cli).

The exit status is cli.main()'s: 0, 1 (a run failed), 2 (bad input), or
128 + the signal that stopped a run (Ctrl-C, SIGTERM, SIGHUP).
"""

import sys

from alloclab_console import main  # the console script's Ctrl-C handling

sys.exit(main())
