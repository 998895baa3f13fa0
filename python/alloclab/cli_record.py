"""`alloclab record`: run a command and record its malloc-family calls into
a trace file per process image (docs/traces.md).

Placeholder until the recorder lands: the parser exists so that the main
parser's layout is fixed."""


def add_parser(sub):
    sub.add_parser("record", help="record a program's allocations into a trace")


def cmd_record(args):
    raise NotImplementedError("alloclab record")
