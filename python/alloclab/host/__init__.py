"""The machine the runs happen on: its state (governor, turbo, SMT,
isolation, load), what to change, the metadata every Result carries, and
the scheduling metrics read from a raw run."""
