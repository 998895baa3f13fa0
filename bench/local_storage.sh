#!/usr/bin/env bash
# The seed-003 reproduction: bench local-storage-create, socket (kzalloc vs
# kmalloc_nolock) and task (BPF memory allocator vs kmalloc_nolock) storage at
# batch 16/32/64, real sockets and threads per owner as the bench, with the
# reproduction's defaults (5 runs of 0.5 s per cell, 0.1 s samples); then the
# allocators alone (owner_work=none). Writes
# bench/results/local_storage{,-alone}.{txt,json,png}. About a minute.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
alloclab reproduce local-storage \
	--json results/local_storage.json --plot results/local_storage.png "$@" |
	tee results/local_storage.txt
alloclab reproduce local-storage --owner-work none \
	--json results/local_storage-alone.json --plot results/local_storage-alone.png "$@" |
	tee results/local_storage-alone.txt
