#!/usr/bin/env bash
# Collective bus bandwidth: weft's Gloo communicator (comm.lanes 2, the
# default, and 1, the single FIFO) vs torch.distributed (gloo backend, Debian
# python3-torch; async with its 2 threads, and serial) on 2 ranks over
# loopback, 1 KiB..256 MiB, all in the same run (best of 2 rounds, the four
# variants alternating). Ops: all_reduce, reduce_scatter, all_gather (torch
# 1.13 gloo has no reduce_scatter: its column is an all-reduce of the full
# buffer, see comm_allreduce_torch.py). Prints the load (uptime) before and
# after. Not run by ctest.
# Usage: tests/bench/comm_allreduce.sh [BUILD_DIR] [MAX_BYTES] [OPS...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../../build}"
max_bytes="${2:-268435456}"
shift $(( $# > 2 ? 2 : $# ))
ops=("$@")
[ ${#ops[@]} -gt 0 ] || ops=(all_reduce reduce_scatter all_gather)
run="$build/bin/weft-run"
for f in "$run" "$build/bin/weft_comm_bench"; do
  [ -x "$f" ] || { echo "comm_allreduce: $f not built (cmake --build $build --target weft-run weft_comm_bench)" >&2; exit 1; }
done
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "load before: $(uptime)"
for op in "${ops[@]}"; do
  # Alternate the variants twice so none always runs on a cold machine; keep the best.
  for round in 1 2; do
    WEFT_BENCH_LANES=2 "$run" -n 2 --worker "$build/bin/weft_comm_bench" -- "$max_bytes" "$op" 2>/dev/null \
      | grep '\] weft ' >> "$out/weft-$op"
    "$run" -n 2 --worker /usr/bin/python3 -- "$here/comm_allreduce_torch.py" "$max_bytes" "$op" 2>/dev/null \
      | grep '\] torch ' >> "$out/torch-$op"
    WEFT_BENCH_LANES=1 "$run" -n 2 --worker "$build/bin/weft_comm_bench" -- "$max_bytes" "$op" 2>/dev/null \
      | grep '\] weft ' >> "$out/weft1-$op"
    WEFT_BENCH_TORCH_SERIAL=1 "$run" -n 2 --worker /usr/bin/python3 -- "$here/comm_allreduce_torch.py" "$max_bytes" "$op" \
      2>/dev/null | grep '\] torch-serial ' >> "$out/serial-$op"
  done
done
echo "load after: $(uptime)"
/usr/bin/python3 - "$out" "${ops[@]}" <<'PY'
import sys
def best(path):
    b = {}
    for line in open(path):
        _, _, _, op, size, iters, secs, bw = line.split()
        size, bw = int(size), float(bw)
        b[size] = max(b.get(size, 0.0), bw)
    return b
def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024: return f"{n} {unit}"
        n //= 1024
d = sys.argv[1]
for op in sys.argv[2:]:
    w, w1, t, s = (best(f"{d}/{k}-{op}") for k in ("weft", "weft1", "torch", "serial"))
    print(f"\n{op} (bus GB/s; torch: async_op=True, 2 concurrent; serial: one at a time)\n")
    print("| size | weft lanes 2 | torch gloo | weft / torch | weft lanes 1 | torch serial |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in sorted(w):
        if size in t and size in w1 and size in s:
            print(f"| {human(size)} | {w[size]:.3f} | {t[size]:.3f} | **{w[size] / t[size]:.2f}** "
                  f"| {w1[size]:.3f} | {s[size]:.3f} |")
PY
