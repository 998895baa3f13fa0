"""Taking measurements: run() plans a grid and runs it in C (run), sweep()
makes it resumable, interleaved and distributable (sweep), the executors
say which units may run side by side (executors), a peer allocator's runs
happen in a child process (_peer), and progress bars (progress)."""
