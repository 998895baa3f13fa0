#!/usr/bin/env bash
# The seed-000 reproduction: both workloads x {transfer cache, spill, no cache}
# x producers 1/2/4/8 x allocs/cycle 1/4/16/64/256, the reproduction's defaults
# (5 runs of 100 ms per real-CPU cell, per_op_sum timing; pass --rigorous or
# --timing per_op_sum,batch for more). Writes bench/results/libarena.{txt,json,png},
# then libarena_nmi and libarena_realtime (.txt, .json): see those scripts.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
alloclab reproduce libarena --json results/libarena.json \
	--plot results/libarena.png "$@" | tee results/libarena.txt
# libarena in NMI context (10k signals/s per worker) and with --realtime workers.
python3 libarena_nmi.py --json results/libarena_nmi.json | tee results/libarena_nmi.txt
python3 libarena_realtime.py --json results/libarena_realtime.json | tee results/libarena_realtime.txt
python3 libarena_nmi.py --context irq --json results/libarena_nmi_irq.json | tee results/libarena_nmi_irq.txt
