#!/bin/bash
# Fault: `kill -9` of rank 1's worker mid-training. Rank 0 exits 3 (peer
# lost) without hanging, the operator restarts the gang (next attempt), both
# ranks resume from the latest checkpoint (the step counter continues) and
# the job succeeds.  With MODE=delete-pod the rank's pod is deleted with
# `kubectl delete pod` instead.
# Usage: kill_rank.sh CLUSTER_DIR SOURCE_DIR [kill|delete-pod]
MODE=${3:-kill}
. "$(dirname "$0")/lib.sh" "$1" "$2" "$MODE"
# 200 steps, checkpoints every 40: a window "past a checkpoint" comes every
# 40 steps, so the test cannot miss them all on a fast machine (120 steps
# took 15 s on an idle one, over before the test looked), and what is left
# after the strike stays short on a loaded one (400 steps once ran past the
# 240 s wait below while the rest of the suite shared the two cores).
STEPS=200
apply_testdata resume.yaml "s/steps: 120/steps: $STEPS/"
[ "$(tj_field resume .spec.worker.train.steps)" = $STEPS ] || fail "step override not applied"
wait_for 60 "phase Running" phase_is resume Running
uid0=$(pod_uid resume-0) || fail "no uid for pod resume-0"
log1=$STATE/logs/${NS}_resume-0_$uid0/worker/0.log
logged_step() { sed -n 's/.*step *\([0-9][0-9]*\)\/'"$STEPS"' .*/\1/p' "$log1" 2>/dev/null | tail -1; }
# Strike between checkpoints, after rank 0 logged a step past the latest one:
# attempt 2 then recomputes steps attempt 1 logged, and their losses must match.
past_checkpoint() { local c; c=$(latest_step) || return 1; [ "$c" -ge 40 ] && [ "$(logged_step)" -gt "$c" ]; }
attempt=$(tj_field resume .status.attempt)
wait_for 30 "rank 1's process" worker_pid resume-1 >/dev/null
pid=$(worker_pid resume-1)
wait_for 120 "a logged step past a checkpoint at step >= 40" past_checkpoint
at=$(latest_step)
if [ "$MODE" = kill ]; then
  kill -9 "$pid" || fail "kill -9 $pid"
  log "killed rank 1 (pid $pid) with a checkpoint at step $at"
else
  kubectl delete pod resume-1 -n "$NS" --wait=false >/dev/null || fail "kubectl delete pod"
  log "deleted pod resume-1 with a checkpoint at step $at"
fi
# Rank 0 of attempt 1 notices and exits 3.
exit0=$STATE/logs/${NS}_resume-0_$uid0/worker/0.exit.json
wait_for 60 "rank 0 of attempt 1 to exit" test -f "$exit0"
code0=$(python3 -c "import json;print(json.load(open('$exit0'))['exitCode'])")
# Killed peer: 3 (peer lost). Deleted pod: rank 1 stops on SIGTERM at a step
# both ranks agree on, and the operator deletes the whole gang at once, so
# rank 0 ends with 3, 143 (its own SIGTERM) or, today, 128 (the worker reports
# a stop its peer asked for as "signal 0"); any retryable code (not 0 or 1) will do.
case "$MODE:$code0" in
  kill:3) ;;
  delete-pod:0 | delete-pod:1) fail "rank 0 exited $code0 after its peer's pod was deleted" ;;
  delete-pod:*) ;;
  *) fail "rank 0 exited $code0, expected 3 (peer lost)" ;;
esac
log "rank 0 exited $code0"
wait_for 60 "attempt $((attempt + 1))" tj_field_is resume .status.attempt $((attempt + 1))
[ "$(tj_field resume .status.restarts)" = 1 ] || fail "restarts $(tj_field resume .status.restarts), expected 1"
# Every rank of the new attempt trains to the end and exits 0.
ranks_done() {
  local r code
  for r in 0 1; do
    code=$(kubectl get pod "resume-$r" -n "$NS" 2>/dev/null \
           -o jsonpath='{.metadata.labels.weft\.dev/attempt} {.status.containerStatuses[0].state.terminated.exitCode}')
    [ "$code" = "$((attempt + 1)) 0" ] || return 1
  done
}
wait_for 240 "both ranks of attempt $((attempt + 1)) to exit 0" ranks_done
log "attempt $((attempt + 1)) finished: $(kubectl get tj resume -n "$NS" --no-headers)"
# It resumed where the checkpoints left off and continued the count.
new0=$(pod_uid resume-0)
[ "$new0" != "$uid0" ] || fail "rank 0 was not recreated"
log2=$STATE/logs/${NS}_resume-0_$new0/worker/0.log
resumed=$(sed -n 's/.*resumed from \/ckpt\/step-\([0-9]*\).*/\1/p' "$log2" | head -1)
[ -n "$resumed" ] && [ "$resumed" -ge "$at" ] || fail "attempt 2 did not resume from step >= $at: $(head -20 "$log2")"
first=$(sed -n 's/.*step *\([0-9][0-9]*\)\/'"$STEPS"' .*/\1/p' "$log2" | head -1)
[ -n "$first" ] && [ "$first" -gt "$resumed" ] || fail "step counter restarted ($first after resuming $resumed)"
[ "$(cat "$CKPT/latest")" = step-$STEPS ] || fail "final checkpoint $(cat "$CKPT/latest")"
# Steps both attempts logged have the same loss: the resume is exact.
losses() { sed -n 's/.*step *\([0-9][0-9]*\)\/'"$STEPS"' | loss \([0-9.]*\).*/\1 \2/p' "$1"; }
overlap=$(join <(losses "$log1" | sort) <(losses "$log2" | sort) | awk '$1 > '"$resumed")
[ -n "$overlap" ] || log "note: attempt 1 was stopped before logging a step past step $resumed; losses not compared"
echo "$overlap" | awk 'NF == 3 && $2 != $3 {bad = 1; print "step " $1 ": " $2 " before, " $3 " after resume"} END {exit bad}' \
  || fail "losses after resuming differ from the interrupted attempt's"
[ "$(live_processes)" = 0 ] || fail "processes left behind"
log "attempt 2 resumed from step $resumed (first logged step $first), same losses on $(echo "$overlap" | grep -c .) overlapping logged steps"
# The job's own verdict.
wait_for_quiet 10 phase_is resume Succeeded \
  || fail "phase $(tj_field resume .status.phase), expected Succeeded (see $CLUSTER/logs/weft-operator.log)"
log "PASS: Succeeded after a gang restart: $(kubectl get tj resume -n "$NS" --no-headers)"
finish 0
