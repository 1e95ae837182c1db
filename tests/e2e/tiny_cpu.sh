#!/bin/bash
# The user's path: `kubectl apply -f manifests/examples/tiny-cpu.yaml` on the
# local cluster; the operator launches 2 ranks, weft-node or real nodes run
# them (fixtures e2e-cluster and e2e-pods), they
# rendezvous through cluster names and train; `kubectl get tj` shows Running
# then Succeeded; the held-out loss (eval every 50 steps) reaches status and
# the Eval column; rank 0's final checkpoint exists and loads.
# Usage: tiny_cpu.sh CLUSTER_DIR SOURCE_DIR BIN_DIR
. "$(dirname "$0")/lib.sh" "$1" "$2" tiny-cpu
BIN=$3
kubectl apply -n "$NS" -f "$SRC/manifests/examples/tiny-cpu.yaml" >/dev/null || fail "kubectl apply"
wait_for 60 "phase Running" phase_is tiny-cpu Running
log "Running: $(kubectl get tj tiny-cpu -n "$NS" --no-headers)"
wait_for 30 "2 ready replicas" tj_field_is tiny-cpu .status.readyReplicas 2
# status.progress comes from rank 0's /metrics (the operator scrapes it every
# --progress-seconds, 10 s by default); the printer columns show it.
progress_filled() {
  local step; step=$(tj_field tiny-cpu .status.progress.step)
  [ -n "$step" ] && [ "$step" -gt 0 ] && [ -n "$(tj_field tiny-cpu .status.progress.loss)" ] \
    && [ -n "$(tj_field tiny-cpu .status.progress.overlapRatio)" ] && [ -n "$(tj_field tiny-cpu .status.progress.tokensPerSecond)" ]
}
wait_for 60 "status.progress from the ranks" progress_filled
# The STEP column prints status.progress.step, LOSS, EVAL and TOKENS/S beside
# it the scraped loss, held-out loss and throughput. A scrape may land between
# the two reads, so compare only a row read while the step stood still.
step_column_matches() {
  local before after
  before=$(tj_field tiny-cpu .status.progress.step)
  row=$(kubectl get tj tiny-cpu -n "$NS" --no-headers)
  after=$(tj_field tiny-cpu .status.progress.step)
  [ "$before" = "$after" ] && echo "$row" | awk -v s="$after" '$5 == s && $6 + 0 > 0 && $7 + 0 > 0 && $8 + 0 > 0 {ok = 1} END {exit !ok}'
}
# The first evaluation runs after step 50.
wait_for 120 "status.progress.evalLoss from rank 0's weft_eval_loss" tj_field_set tiny-cpu .status.progress.evalLoss
wait_for 30 "the STEP, LOSS, EVAL and TOKENS/S columns showing status.progress" step_column_matches
log "progress: $(tj_field tiny-cpu .status.progress) | kubectl get tj: $row"
# Rank 0's working directory: on a real node its /tmp (an emptyDir, which
# goes with the container), copied by workdir_of while rank 0 serves its
# final metrics (metrics.linger_seconds) after "training done"; under
# weft-node its pod's own dir.
work=$(workdir_of tiny-cpu-0) || fail "rank 0's working directory"
wait_for 300 "phase Succeeded" phase_is tiny-cpu Succeeded
log "Succeeded: $(kubectl get tj tiny-cpu -n "$NS" --no-headers)"
# status.progress is final, not the last scrape's: rank 0's termination
# message carries its last step.
[ "$(tj_field tiny-cpu .status.progress.step)" = 200 ] \
  || fail "status.progress after Succeeded: $(tj_field tiny-cpu .status.progress) (rank 0: $(kubectl get pod tiny-cpu-0 -n "$NS" -o jsonpath='{.status.containerStatuses[0].state.terminated.message}'))"
[ -n "$(tj_field tiny-cpu .status.progress.evalLoss)" ] \
  || fail "no held-out loss after Succeeded: $(tj_field tiny-cpu .status.progress)"
[ "$(tj_field tiny-cpu .status.restarts)" = 0 ] || fail "restarts: $(tj_field tiny-cpu .status.restarts)"
for r in 0 1; do
  code=$(kubectl get pod "tiny-cpu-$r" -n "$NS" -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}')
  [ "$code" = 0 ] || fail "rank $r exit code '$code'"
done
summary=$work/runs/weft/summary.json
[ -f "$summary" ] || fail "no $summary"
steps=$(python3 -c "import json;print(json.load(open('$summary'))['steps_done'])")
[ "$steps" = 200 ] || fail "summary says $steps steps"
evals=$(python3 -c "import json;print(json.load(open('$summary'))['eval']['steps'])")
[ "$evals" = "[50, 100, 150, 200]" ] || fail "summary's evaluations after steps $evals"
ckpt=$work/runs/weft/checkpoints
[ "$(cat "$ckpt/latest" 2>/dev/null)" = step-200 ] || fail "latest checkpoint: $(cat "$ckpt/latest" 2>&1)"
# It loads: the same config resumed from it (one rank) has nothing left to do.
kubectl get cm tiny-cpu-config -n "$NS" -o jsonpath='{.data.config\.yaml}' > "$CLUSTER/$NS.yaml"
out=$("$BIN/weft-worker" "$CLUSTER/$NS.yaml" --checkpoint-dir "$ckpt" --out "$CLUSTER/$NS-resume" 2>&1) \
  || fail "resuming from $ckpt: $out"
grep -q "resumed from $ckpt/step-200" <<<"$out" || fail "checkpoint not loaded: $out"
rm -rf "$CLUSTER/$NS.yaml" "$CLUSTER/$NS-resume"  # finish removes the copied work dir
log "PASS: 2 ranks trained 200 steps, checkpoint $ckpt/step-200 loads"
finish 0
