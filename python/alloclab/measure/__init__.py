"""Taking measurements: run() and sweep(), the executors that may run
units side by side, the peer child process, and progress bars."""
