"""`alloclab trace`: what a recorded trace holds (docs/traces.md).

Placeholder until the analysis lands: the parser exists so that the main
parser's layout is fixed."""


def add_parser(sub):
    sub.add_parser("trace", help="what a recorded trace holds")


def cmd_trace(args):
    raise NotImplementedError("alloclab trace")
