"""The console script `alloclab`, outside the alloclab package: importing
the package and its commands takes a third of a second (NumPy, the C
library), and a Ctrl-C in that time ended in a traceback, or was lost in
an import callback and the command ran on. Until the commands are loaded,
SIGINT ends the process at once, as an interrupt during a command does:
`alloclab: interrupted`, exit 130 (nothing has been written yet)."""

import os
import signal


def _interrupted(signum, frame):
    os.write(2, b"alloclab: interrupted\n")
    os._exit(130)


def main(argv=None):
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # (nohup, a background job)
    if not ignored:
        signal.signal(signal.SIGINT, _interrupted)
    from alloclab.cli.main import main as commands
    if not ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return commands(argv)
