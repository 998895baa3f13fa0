#!/usr/bin/env bash
# Wall time from a fresh virtual environment to the first printed table:
# clone, venv, pip install, alloclab run.
#   bash bench/fresh_install.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s.%N)
git clone -q "$root" "$tmp/alloclab"
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q "$tmp/alloclab"
"$tmp/venv/bin/alloclab" run malloc-free --policy buddy --producers 1 --allocs-per-cycle 64 \
	--runs 1 --duration 0.1
end=$(date +%s.%N)
echo "fresh venv to first table: $(echo "$end - $start" | bc) s"
