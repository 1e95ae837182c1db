#!/bin/bash
# spec.suspend, the contract Kueue drives: `kubectl patch` to suspend a job
# mid-run deletes its pods, whose workers stop on SIGTERM at a step they agree
# on and checkpoint it (exit 143) before they go; the job is Suspended with no
# pods. Patched back, it resumes from that checkpoint as a new attempt (no
# restart counted) and succeeds, and every logged loss of both attempts equals
# an uninterrupted `weft-run -n 2` on the same worker config. The job is
# ZeRO-2 with async checkpoints (sharded files written in the background, the
# default on GPUs) every 5 steps, so a write is often in flight at the
# suspend: the stop publishes it and the step it stopped at before exiting.
# Usage: suspend.sh CLUSTER_DIR SOURCE_DIR BIN_DIR
. "$(dirname "$0")/lib.sh" "$1" "$2" suspend
BIN=$3
STEPS=150
# A grace period of the job's choosing (the time a worker has to checkpoint
# after SIGTERM) reaches the pods, and the local kubelet honours it.
apply_testdata resume.yaml "s/steps: 120, log_every: 5/steps: $STEPS, log_every: 1/" \
  "s/checkpoint: {dir: \/ckpt, every: 40}/checkpoint: {dir: \/ckpt, every: 5, async: true}/" \
  "s/parallel: {strategy: dp, bucket_cap_mb: 1}/parallel: {strategy: zero, bucket_cap_mb: 1, zero: {stage: 2}}/" \
  "s/^  template:$/  template:\n    terminationGracePeriodSeconds: 120/"
[ "$(tj_field resume .spec.worker.train.steps)" = $STEPS ] || fail "step override not applied"
[ "$(tj_field resume .spec.worker.checkpoint.async)" = true ] || fail "checkpoint.async override not applied"
[ "$(tj_field resume .spec.worker.parallel.strategy)" = zero ] || fail "strategy override not applied"
until_rank0_logged resume $STEPS 30
grace=$(kubectl get pod resume-0 -n "$NS" -o jsonpath='{.spec.terminationGracePeriodSeconds}')
[ "$grace" = 120 ] || fail "pod resume-0 has terminationGracePeriodSeconds '$grace', expected the template's 120"
kubectl patch tj resume -n "$NS" --type merge -p '{"spec":{"suspend":true}}' >/dev/null || fail "kubectl patch suspend"
log "suspended at logged step $(logged_step)"
wait_for 60 "phase Suspended" phase_is resume Suspended
wait_for 60 "no pods" no_pods
# Rank 0 stopped on SIGTERM and checkpointed where it stopped.
exit0=${log0%.log}.exit.json
wait_for 10 "rank 0's exit" test -f "$exit0"
code0=$(python3 -c "import json;print(json.load(open('$exit0'))['exitCode'])")
[ "$code0" = 143 ] || fail "rank 0 exited $code0, expected 143 (SIGTERM after a checkpoint)"
stopped=$(sed -n 's/.*stopped by signal 15 at step \([0-9]*\); checkpoint.*/\1/p' "$log0" | tail -1)
[ -n "$stopped" ] || fail "rank 0 did not checkpoint on SIGTERM: $(tail -3 "$log0")"
[ "$(latest_step)" = "$stopped" ] || fail "latest checkpoint step-$(latest_step), rank 0 stopped at $stopped"
# Published, not left half-way: every rank's shard is in it.
for f in meta.json optim-rank-0.safetensors optim-rank-1.safetensors; do
  [ -f "$CKPT/step-$stopped/$f" ] || fail "step-$stopped has no $f: $(ls -A "$CKPT" "$CKPT/step-$stopped" 2>&1)"
done
leftover=$(ls -A "$CKPT" | grep '^\.tmp' || true)
[ -z "$leftover" ] || fail "unpublished checkpoint writes left behind: $leftover"
log "both ranks stopped at step $stopped and checkpointed it; no pods left"
log "kubectl get tj: $(kubectl get tj resume -n "$NS" --no-headers)"
echo "---- kubectl describe tj resume (suspended)"
kubectl describe tj resume -n "$NS" | sed -n '/^Status:/,$p'
[ "$(live_processes)" = 0 ] || fail "processes left behind while suspended"

kubectl patch tj resume -n "$NS" --type merge -p '{"spec":{"suspend":false}}' >/dev/null || fail "kubectl patch resume"
wait_for 300 "phase Succeeded" phase_is resume Succeeded
log "Succeeded: $(kubectl get tj resume -n "$NS" --no-headers)"
[ "$(tj_field resume .status.restarts)" = 0 ] || fail "a suspension counted as a restart: $(tj_field resume .status.restarts)"
[ "$(tj_field resume .status.progress.step)" = $STEPS ] || fail "status.progress: $(tj_field resume .status.progress)"
resumed=$(sed -n 's/.*resumed from \/ckpt\/step-\([0-9]*\).*/\1/p' $(logs_of resume-0) | head -1)
[ "$resumed" = "$stopped" ] || fail "resumed from step '$resumed', suspended at $stopped"
echo "---- kubectl describe tj resume (resumed and done)"
kubectl describe tj resume -n "$NS" | sed -n '/^Status:/,$p'
match_weft_run resume 2 $STEPS '' "2 ranks suspended at step $stopped and resumed"
[ "$(live_processes)" = 0 ] || fail "processes left behind"
log "PASS: suspended at step $stopped (checkpointed), resumed from it, same losses as an uninterrupted run"
finish 0
