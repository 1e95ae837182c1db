#!/bin/bash
# Bucket-size tuning benchmark (docs/benchmarks.md): for each emulated network
# (comm.simulate), the steady-state step time of a 2-rank data-parallel job
#  - at fixed caps (the offline sweep; 25 MiB is weft's default),
#  - under the operator's BucketTuner (weft_tuner_bench --tune, start 25 MiB),
# all measured the same way (weft_tuner_bench). Prints a Markdown table and
# writes JSON lines to OUT_DIR/results.jsonl.
# Usage: tests/bench/tuning_bench.sh BUILD_DIR [OUT_DIR]
set -euo pipefail
BUILD=$(cd "${1:?BUILD_DIR}" && pwd)
RESULTS=${2:-/tmp/weft-tuning-bench}
mkdir -p "$RESULTS"; : > "$RESULTS/results.jsonl"
BENCH=$BUILD/bin/weft_tuner_bench
SWEEP=${WEFT_BENCH_SWEEP:-"0.125 0.25 0.5 1 2 4 25"}
NETWORKS=${WEFT_BENCH_NETWORKS:-"10:100 200:10"}  # latency_us:bandwidth_gbps
# The model: the tiny preset (3 MiB of gradients) unless WEFT_BENCH_MODEL
# gives a YAML flow mapping, e.g. "{d_model: 512, n_layers: 8, vocab_size:
# 4096}" for ~100 MiB of gradients, where one 25 MiB bucket cannot hide.
MODEL=${WEFT_BENCH_MODEL:-"{}"}
MAX_MB=${WEFT_BENCH_MAX_MB:-32}
for net in $NETWORKS; do
  lat=${net%%:*} bw=${net##*:}
  cfg=$RESULTS/net-$lat-$bw.yaml
  cat > "$cfg" <<YAML
preset: tiny
device: cpu
model: $MODEL
train: {micro_batch: 2, seq_len: 32, log_every: 100000}
optim: {min_lr_ratio: 1}
checkpoint: {every: 0}
parallel: {strategy: dp, bucket_cap_mb: 25}
comm:
  simulate: {latency_us: $lat, bandwidth_gbps: $bw}
YAML
  for mb in $SWEEP; do
    "$BENCH" --config "$cfg" --fixed-mb "$mb" --warmup 10 --measure 40 --work "$RESULTS/w" 2>/dev/null \
      | python3 -c "import json,sys;r=json.loads(sys.stdin.read().strip().splitlines()[-1]);r['net']='$net';print(json.dumps(r))" >> "$RESULTS/results.jsonl"
  done
  "$BENCH" --config "$cfg" --tune --start-mb 25 --min-mb 0.0625 --max-mb "$MAX_MB" --steps-per-trial 20 --max-trials 8 \
    --warmup 10 --measure 40 --work "$RESULTS/w" 2> "$RESULTS/tune-$lat-$bw.log" \
    | python3 -c "import json,sys;r=json.loads(sys.stdin.read().strip().splitlines()[-1]);r['net']='$net';print(json.dumps(r))" >> "$RESULTS/results.jsonl"
done
python3 - "$RESULTS/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for net in dict.fromkeys(r["net"] for r in rows):
    lat, bw = net.split(":")
    fixed = [r for r in rows if r["net"] == net and r["mode"] == "fixed"]
    tuned = [r for r in rows if r["net"] == net and r["mode"] == "tuned"][0]
    best = min(fixed, key=lambda r: r["step_s"])
    default = [r for r in fixed if r["bucket_mb"] == 25][0]
    print(f"\n### {lat} us / {bw} Gb/s\n")
    print("| cap (MiB) | step (ms) | exposed comm (ms) |\n|---|---|---|")
    for r in sorted(fixed, key=lambda r: r["bucket_mb"]):
        print(f"| {r['bucket_mb']:g} | {r['step_s']*1e3:.1f} | {r['exposed_comm_s']*1e3:.1f} |")
    print(f"| tuned -> {tuned['bucket_mb']:g} | {tuned['step_s']*1e3:.1f} | {tuned['exposed_comm_s']*1e3:.1f} |")
    trials = ", ".join("%g: %.1f ms" % (t["mb"], t["median_step_s"] * 1e3) for t in tuned["trials"])
    print(f"\ntrials: {len(tuned['trials'])} ({trials})")
    print(f"tuned / best fixed ({best['bucket_mb']:g} MiB): {tuned['step_s']/best['step_s']:.3f}; "
          f"tuned / 25 MiB default: {tuned['step_s']/default['step_s']:.3f}")
PY
