#!/usr/bin/env bash
# The seed-004 reproduction: test_vmalloc under v6.18
# (vmalloc-default), 6-19-0-rc1 (vmalloc-large), vfree-high-order
# (vmalloc-large-bulkfree) and pcp-first, every row of the seed's table plus
# Rezki's 3/100-page comparison, at 1 and 2 threads. Loops are calibrated per
# row so that each run lasts at least 100 ms (--scale 1 passes the seed's own).
# Writes bench/results/vmalloc-<threads>t.{txt,json,png} (+ -sizes.png), then
# the cost figures that decide the table (vmalloc_costs.py: fixed/per-page
# cost, vfree:vmalloc time, 3/100-page ratios, the h:0 regression rows) to
# bench/results/vmalloc-costs.txt.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
for t in 1 2; do
	alloclab reproduce vmalloc --pcp-first --threads "$t" \
		--json "results/vmalloc-${t}t.json" --plot "results/vmalloc-${t}t.png" "$@" |
		tee "results/vmalloc-${t}t.txt"
done
python3 vmalloc_costs.py --regression | tee results/vmalloc-costs.txt
