#!/usr/bin/env bash
# All-reduce bus bandwidth: weft's Gloo communicator vs torch.distributed
# (gloo backend, Debian python3-torch) on 2 ranks over loopback, 1 KiB..256 MiB,
# measured in the same run (bus bandwidth = 2(n-1)/n * bytes / time, best of
# 2 rounds). Not run by ctest.
# Usage: tests/bench/comm_allreduce.sh [BUILD_DIR] [MAX_BYTES]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../../build}"
max_bytes="${2:-268435456}"
run="$build/bin/weft-run"
for f in "$run" "$build/bin/weft_comm_bench"; do
  [ -x "$f" ] || { echo "comm_allreduce: $f not built (cmake --build $build --target weft-run weft_comm_bench)" >&2; exit 1; }
done
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# Alternate the two twice so neither always runs on a cold machine; keep the best.
for round in 1 2; do
  "$run" -n 2 --worker "$build/bin/weft_comm_bench" -- "$max_bytes" 2>/dev/null | grep '\] weft ' >> "$out/weft"
  "$run" -n 2 --worker /usr/bin/python3 -- "$here/comm_allreduce_torch.py" "$max_bytes" 2>/dev/null | grep '\] torch ' >> "$out/torch"
  WEFT_BENCH_TORCH_SERIAL=1 "$run" -n 2 --worker /usr/bin/python3 -- "$here/comm_allreduce_torch.py" "$max_bytes" \
    2>/dev/null | grep '\] torch-serial ' >> "$out/serial"
done
/usr/bin/python3 - "$out/weft" "$out/torch" "$out/serial" <<'PY'
import sys
def best(path):
    b = {}
    for line in open(path):
        _, _, _, size, iters, secs, bw = line.split()
        size, bw = int(size), float(bw)
        b[size] = max(b.get(size, 0.0), bw)
    return b
w, t, s = best(sys.argv[1]), best(sys.argv[2]), best(sys.argv[3])
def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024: return f"{n} {unit}"
        n //= 1024
# torch: async_op=True, ProcessGroupGloo overlaps 2 collectives (2 threads);
# torch serial: one at a time, as weft's FIFO comm thread runs them.
print("| size | weft GB/s | torch gloo GB/s | weft / torch | torch serial GB/s | weft / torch serial |")
print("|---:|---:|---:|---:|---:|---:|")
for size in sorted(w):
    if size in t and size in s:
        print(f"| {human(size)} | {w[size]:.3f} | {t[size]:.3f} | {w[size] / t[size]:.2f} "
              f"| {s[size]:.3f} | {w[size] / s[size]:.2f} |")
PY
