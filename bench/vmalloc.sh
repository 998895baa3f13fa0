#!/usr/bin/env bash
# The seed-004 reproduction (issue 5 figure): test_vmalloc under v6.18
# (vmalloc-default), 6-19-0-rc1 (vmalloc-large), vfree-high-order
# (vmalloc-large-bulkfree) and pcp-first, every row of the seed's table plus
# Rezki's 3/100-page comparison, at 1 and 2 threads. Loops are the seed's x
# SCALE (default 0.1, about a minute per thread count here; 1 = the seed's).
# Writes bench/results/vmalloc-<threads>t.{txt,json,png} (+ -sizes.png).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
SCALE=${SCALE:-0.1}
RUNS=${RUNS:-5}
for t in 1 2; do
	alloclab reproduce vmalloc --scale "$SCALE" --runs "$RUNS" --threads "$t" \
		--json "results/vmalloc-${t}t.json" --plot "results/vmalloc-${t}t.png" "$@" |
		tee "results/vmalloc-${t}t.txt"
done
