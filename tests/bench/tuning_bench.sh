#!/bin/bash
# Bucket-size tuning benchmark (docs/benchmarks/tuning.md): for each emulated network
# (comm.simulate), one 2-rank data-parallel job runs under the operator's
# BucketTuner (weft_tuner_bench --tune, start 25 MiB, confirmRounds
# WEFT_BENCH_CONFIRM, default 2) until it converges; then
# the same job times the chosen cap against every cap of the offline sweep
# (25 MiB among them, the size before auto) in interleaved windows, ROUNDS
# rounds (weft_tuner_bench --compare): one process, every size measured the
# same way, so load drifting over minutes does not pose as a difference
# between sizes. Prints Markdown tables and writes JSON lines to
# OUT_DIR/results.jsonl.
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
ROUNDS=${WEFT_BENCH_ROUNDS:-3}
CONFIRM=${WEFT_BENCH_CONFIRM:-2}  # the tuner's final check (spec confirmRounds)
echo "load before: $(uptime)"
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
  "$BENCH" --config "$cfg" --tune --start-mb 25 --min-mb 0.0625 --max-mb "$MAX_MB" --steps-per-trial 20 --max-trials 8 \
    --confirm-rounds "$CONFIRM" --warmup 5 --measure 20 --compare "${SWEEP// /,}" --rounds "$ROUNDS" --deadline 3600 --work "$RESULTS/w" \
    2> "$RESULTS/tune-$lat-$bw.log" \
    | python3 -c "import json,sys;r=json.loads(sys.stdin.read().strip().splitlines()[-1]);r['net']='$net';print(json.dumps(r))" >> "$RESULTS/results.jsonl"
done
echo "load after: $(uptime)"
python3 - "$RESULTS/results.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    lat, bw = r["net"].split(":")
    chosen = r["bucket_mb"]
    rows = {c["bucket_mb"]: c for c in r["compare"]}
    sweep = [c for mb, c in rows.items() if mb != chosen] or list(rows.values())
    best = min(sweep, key=lambda c: c["step_s"])
    tuned = rows[chosen]
    print(f"\n### {lat} us / {bw} Gb/s ({r['rounds']} rounds of interleaved windows)\n")
    print("| cap (MiB) | median step (ms) | windows (ms) | exposed comm (ms) |\n|---|---|---|---|")
    for mb in sorted(rows):
        c = rows[mb]
        tag = " (tuned)" if mb == chosen else ""
        wins = ", ".join("%.1f" % (x * 1e3) for x in c["windows_step_s"])
        print(f"| {mb:g}{tag} | {c['step_s']*1e3:.1f} | {wins} | {c['exposed_comm_s']*1e3:.1f} |")
    trials = ", ".join("%g: %.1f ms" % (t["mb"], t["median_step_s"] * 1e3) for t in r["trials"])
    print(f"\ntrials: {len(r['trials'])} ({trials})")
    line = f"tuned ({chosen:g} MiB) / best of the sweep ({best['bucket_mb']:g} MiB): {tuned['step_s']/best['step_s']:.3f}"
    if 25 in rows:
        line += f"; tuned / 25 MiB: {tuned['step_s']/rows[25]['step_s']:.3f}; 25 MiB / best: {rows[25]['step_s']/best['step_s']:.3f}"
    print(line)
PY
