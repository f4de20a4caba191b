#!/usr/bin/env bash
# Here, with network: the offline bundle for an air-gapped GPU host (Python 3.12, CUDA 13, its own CUDA torch)
# cut into parts that fit a command runner's per-call limit (64 MiB with the working tree). Prints the calls.
#   usage: bash bench/device/parts.sh [PART_MB]      (JAR=1 to carry the RAPIDS Accelerator jar too: +575 MB)
set -euo pipefail
MB=${1:-58}
B=.devbundle; P=.devparts
for d in "/$B/" "/$P/"; do grep -qx "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
rm -rf "$B" "$P"
make bundle BUNDLE="$B" TARGET=cu13-py312 $([ "${JAR:-0}" = 1 ] || echo NOJAR=1)
mkdir -p "$P"
tar cf - -C "$B" . | split -b "${MB}M" -d -a 2 - "$P/part."
n=0; for f in "$P"/part.*; do mkdir -p "$P/c$n"; mv "$f" "$P/c$n/"; n=$((n + 1)); done
md5=$(for k in $(seq 0 $((n - 1))); do cat "$P/c$k"/part.*; done | md5sum | cut -c1-32)
echo "$n $md5" > "$P/c0/PARTS"
du -sh "$B"; echo "$n parts under $P/ (md5 $md5); calls, back to back (the machine goes back after 30 s idle):"
for k in $(seq 0 $((n - 1))); do echo "  carry [\"$P/c$k\"]  command: bash bench/device/receive.sh $k"; done
