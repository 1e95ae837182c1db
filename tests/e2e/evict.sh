#!/bin/bash
# A rank evicted through the eviction API (what `kubectl drain` and cluster
# autoscalers use) mid-run: its worker stops on SIGTERM and both ranks
# checkpoint the step they agree on; the operator restarts the gang without
# counting it against maxRestarts (0 here, so a counted restart would fail the
# job), with no backoff, and the new attempt resumes from that checkpoint,
# succeeds, and matches an uninterrupted `weft-run -n 2` loss for loss.
# status.restartsByCause says why: "Deleted" on this v1.20 API server, which
# marks an eviction no differently from a delete ("Evicted" on >= 1.26, whose
# DisruptionTarget condition the operator reads; unit and API-server tests
# cover that).
# Usage: evict.sh CLUSTER_DIR SOURCE_DIR BIN_DIR
. "$(dirname "$0")/lib.sh" "$1" "$2" evict
BIN=$3
STEPS=150
apply_testdata resume.yaml "s/steps: 120, log_every: 5/steps: $STEPS, log_every: 1/; s/maxRestarts: 2, backoffSeconds: 1/maxRestarts: 0, backoffSeconds: 60/"
[ "$(tj_field resume .spec.worker.train.steps)" = $STEPS ] || fail "step override not applied"
[ "$(tj_field resume .spec.restartPolicy.maxRestarts)" = 0 ] || fail "maxRestarts override not applied"
until_rank0_logged resume $STEPS 30
printf '{"apiVersion":"policy/v1beta1","kind":"Eviction","metadata":{"name":"resume-1","namespace":"%s"}}' "$NS" \
  | kubectl create --raw "/api/v1/namespaces/$NS/pods/resume-1/eviction" -f - >/dev/null \
  || fail "the eviction API refused to evict resume-1"
log "evicted resume-1 at logged step $(logged_step)"
wait_for 60 "attempt 1" tj_field_is resume .status.attempt 1
# Rank 0 stops with its peer (or on its own SIGTERM, when the restart deletes
# its pod first) and checkpoints the step they agree on.
stop_line() { sed -n 's/.*stopped .*at step \([0-9]*\)[; ].*checkpoint \/ckpt.*/\1/p' "$log0" | tail -1; }
stopped_at_checkpoint() { [ -n "$(stop_line)" ]; }
wait_for 30 "rank 0's stop at a checkpoint" stopped_at_checkpoint
stopped=$(stop_line)
[ -n "$stopped" ] || fail "rank 0 did not stop and checkpoint with its evicted peer: $(tail -3 "$log0")"
log "both ranks stopped at step $stopped; restarting: $(tj_field resume .status.restartsByCause)"
echo "---- kubectl get tj resume (restarting after the eviction)"
kubectl get tj resume -n "$NS"
wait_for 300 "phase Succeeded" phase_is resume Succeeded
log "Succeeded: $(kubectl get tj resume -n "$NS" --no-headers)"
[ "$(tj_field resume .status.restarts)" = 1 ] || fail "restarts $(tj_field resume .status.restarts), expected 1"
[ "$(tj_field resume .status.restartsByCause.Deleted)" = 1 ] \
  || fail "restartsByCause $(tj_field resume .status.restartsByCause), expected Deleted: 1"
[ "$(tj_field resume .status.lastRestartCause)" = Deleted ] || fail "lastRestartCause $(tj_field resume .status.lastRestartCause)"
resumed=$(sed -n 's/.*resumed from \/ckpt\/step-\([0-9]*\).*/\1/p' $(logs_of resume-0) | head -1)
[ "$resumed" = "$stopped" ] || fail "resumed from step '$resumed', evicted at $stopped"
echo "---- kubectl get tj resume (evicted and recovered)"
kubectl get tj resume -n "$NS"
echo "---- kubectl describe tj resume (evicted and recovered)"
kubectl describe tj resume -n "$NS" | sed -n '/^Status:/,$p'
match_weft_run resume 2 $STEPS '' "2 ranks, rank 1 evicted at step $stopped"
[ "$(live_processes)" = 0 ] || fail "processes left behind"
log "PASS: evicted at step $stopped, restarted without counting (maxRestarts 0), resumed from it, same losses"
finish 0
