#!/bin/bash
# The ZeRO-2 example (manifests/examples/zero.yaml: 4 CPU ranks, interleaved
# step, parameter gathers overlapped with forward) applied with the real
# kubectl, cut to 20 steps for CI: the ranks train sharded, every rank writes
# its optimizer shard into the shared checkpoint volume, all exit 0 and the job succeeds.
. "$(dirname "$0")/lib.sh" "$1" "$2" zero-example
CKPT=$CLUSTER/ckpt/$NS
rm -rf "$CKPT"; mkdir -p "$CKPT"; chmod 0777 "$CKPT"
sed -e 's/^    device: cpu$/    device: cpu\n    train: {steps: 20, log_every: 10}/' \
    -e "s#path: /tmp/weft-tiny-zero2#path: $CKPT#" "$SRC/manifests/examples/zero.yaml" \
  | kubectl apply -n "$NS" -f - >/dev/null || fail "kubectl apply"
[ "$(tj_field tiny-zero2 .spec.worker.train.steps)" = 20 ] || fail "step override not applied"
work=$(workdir_of tiny-zero2-0) || fail "rank 0's working directory"
wait_for 240 "phase Succeeded" phase_is tiny-zero2 Succeeded
log "Succeeded: $(kubectl get tj tiny-zero2 -n "$NS" --no-headers)"
codes=$(kubectl get pods -n "$NS" -o jsonpath='{range .items[*]}{.status.containerStatuses[0].state.terminated.exitCode}{" "}{end}')
[ "$codes" = "0 0 0 0 " ] || fail "exit codes: $codes"
log0=$(logs_of tiny-zero2-0 | tail -1)
grep -q "ZeRO stage 2" "$log0" || fail "rank 0 did not run ZeRO-2: $(head -20 "$log0")"
summary=$work/runs/weft/summary.json
[ "$(python3 -c "import json;s=json.load(open('$summary'));print(s['steps_done'], s['world_size'])")" = "20 4" ] \
  || fail "summary: $(head -c 400 "$summary" 2>&1)"
[ "$(cat "$CKPT/latest" 2>/dev/null)" = step-20 ] || fail "latest checkpoint: $(cat "$CKPT/latest" 2>&1)"
for r in 0 1 2 3; do
  [ -f "$CKPT/step-20/optim-rank-$r.safetensors" ] || fail "no optimizer shard of rank $r: $(ls "$CKPT/step-20")"
done
log "PASS: 4 ZeRO-2 ranks trained 20 steps: $(grep -m1 'ZeRO stage' "$log0")"
finish 0
