#!/bin/bash
# The rendezvous store under a simulated gang (docs/benchmarks/store.md):
# weft_store_bench for each pattern and rank count, one line each, each run
# bounded by LIMIT_S. Usage:
#   tests/bench/store_bench.sh [BUILD_DIR]
# Env: RANKS (default "1024 2048 4096 8192"), OLD_RANKS (the gloo-old pattern,
# O(N^3) bytes; default "64 128 256"), PATTERNS (default "nccl gloo"),
# LIMIT_S (default 300).
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
BENCH="$BUILD/bin/weft_store_bench"
LIMIT_S=${LIMIT_S:-300}
ulimit -n "$(ulimit -Hn)"
echo "# weft $(git -C "$SRC" rev-parse --short HEAD) on $(nproc) cores, $(uname -r)"
for n in ${OLD_RANKS-64 128 256}; do
  timeout $((LIMIT_S + 30)) "$BENCH" --pattern gloo-old --ranks "$n" --limit-s "$LIMIT_S"
done
for p in ${PATTERNS-nccl gloo}; do
  for n in ${RANKS-1024 2048 4096 8192}; do
    timeout $((LIMIT_S + 30)) "$BENCH" --pattern "$p" --ranks "$n" --limit-s "$LIMIT_S"
  done
done
