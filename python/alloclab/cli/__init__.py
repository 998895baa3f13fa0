"""The command line, a module per command: main (the parser of every other
command, the dispatch, `check`), run, preload, reproduce, compare, show,
list, record, trace and libarena, with flags (what run and reproduce
share) and format (what the commands print, the error types).
``alloclab.cli.main`` runs a command line; the console script is
``alloclab_console.main``, which imports it."""

from .main import main

__all__ = ["main"]
