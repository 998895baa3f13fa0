#!/usr/bin/env bash
# The seed-000 reproduction: both workloads x {transfer cache, spill, no cache}
# x producers 1/2/4/8 x allocs/cycle 1/4/16/64/256, the reproduction's defaults
# (5 runs of 100 ms per real-CPU cell, per_op_sum timing; pass --rigorous or
# --timing per_op_sum,batch for more). Writes bench/results/libarena.{txt,json,png}.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
alloclab reproduce libarena --json results/libarena.json \
	--plot results/libarena.png "$@" | tee results/libarena.txt
