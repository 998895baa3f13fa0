"""Real programs on a policy: the LD_PRELOAD shim (preload), recording a
program's malloc-family calls (record), and the supervisor that keeps a
recorded program from outliving its recorder (_supervise)."""
