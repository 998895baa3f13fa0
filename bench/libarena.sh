#!/usr/bin/env bash
# The seed-000 reproduction (issue 3 figure): both workloads x {transfer cache,
# spill, no cache} x producers 1/2/4/8 x allocs/cycle 1/4/16/64/256, 3 runs,
# per_op_sum and batch timing. Writes bench/results/libarena.{txt,json,png}.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
alloclab reproduce libarena --json results/libarena.json \
	--plot results/libarena.png "$@" | tee results/libarena.txt
