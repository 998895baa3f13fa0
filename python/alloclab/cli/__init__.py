"""The command line, a module per command: main (the parser, the dispatch
and `run`), compare, show, list, record, trace, libarena, with format (what
run and show print) and quoting (the hint for an unquoted policy).
``alloclab.cli.main`` is the console script's entry point."""

from .main import main

__all__ = ["main"]
