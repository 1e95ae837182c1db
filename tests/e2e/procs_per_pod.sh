#!/bin/bash
# Several ranks per pod (spec.procsPerPod) on the local cluster: weft-run in
# each pod starts its ranks, pod i running ranks i*P .. i*P+P-1, and the job
# trains to Succeeded with, step for step, the losses of `weft-run -n PODS*P`
# on the same worker config outside the cluster.
#   dp    2 pods x 2 ranks, and `kill -9` of one rank inside pod 1 mid-run:
#         its launcher fails the pod, the operator restarts the whole gang,
#         which resumes from the checkpoint; every logged loss, of both
#         attempts, still equals the 4-rank run's
#   zero  2 pods x 2 ranks, ZeRO-2
#   isp   2 pods x 3 ranks, sp 2 and wp 2: the group of ranks 2 and 3 spans
#         the two pods
# Usage: procs_per_pod.sh CLUSTER_DIR SOURCE_DIR BIN_DIR dp|zero|isp
MODE=${4:?usage: procs_per_pod.sh CLUSTER_DIR SOURCE_DIR BIN_DIR dp|zero|isp}
. "$(dirname "$0")/lib.sh" "$1" "$2" "procs-$MODE"
BIN=$3
case $MODE in
  dp) PODS=2 PROCS=2 STEPS=60 PARALLEL='{strategy: dp, bucket_cap_mb: 1}' ;;
  zero) PODS=2 PROCS=2 STEPS=40 PARALLEL='{strategy: zero, zero: {stage: 2}, bucket_cap_mb: 1}' ;;
  isp) PODS=2 PROCS=3 STEPS=30 PARALLEL='{strategy: isp, sp: 2, wp: 2}' ;;
  *) fail "unknown mode $MODE" ;;
esac
WORLD=$((PODS * PROCS))
J=ppp
watch_exits
apply_testdata procs-per-pod.yaml "s/__NAME__/$J/" "s/__PODS__/$PODS/" "s/__PROCS__/$PROCS/" \
  "s/__STEPS__/$STEPS/" "s/__PARALLEL__/$PARALLEL/"
wait_for 60 "phase Running" phase_is $J Running
[ "$(tj_field $J .status.ranks)" = $WORLD ] || fail "status.ranks '$(tj_field $J .status.ranks)', expected $WORLD"
cmd=$(kubectl get pod $J-1 -n "$NS" -o jsonpath='{.spec.containers[0].command[0]} {.spec.containers[0].args[*]}')
log "pod $J-1 runs: $cmd"
[ "$cmd" = "weft-run --from-env -- /etc/weft/config.yaml" ] || fail "pod $J-1 command: $cmd"
# ...and the gang's shape only once, in its launch environment.
pod_env() { kubectl get pod $J-1 -n "$NS" -o jsonpath="{.spec.containers[0].env[?(@.name==\"$1\")].value}"; }
[ "$(pod_env WORLD_SIZE) $(pod_env LOCAL_WORLD_SIZE) $(pod_env NODE_RANK)" = "$WORLD $PROCS 1" ] \
  || fail "pod $J-1 env WORLD_SIZE/LOCAL_WORLD_SIZE/NODE_RANK: $(pod_env WORLD_SIZE)/$(pod_env LOCAL_WORLD_SIZE)/$(pod_env NODE_RANK)"
log "Running: $(kubectl get tj $J -n "$NS" --no-headers)"

losses() { step_losses $STEPS '\[rank 0\] ' "$@"; }
restarts=0
if [ "$MODE" = dp ]; then
  wait_for 30 "pod $J-0's log" has_log $J-0
  log0=$(logs_of $J-0 | head -1)
  logged_step() { losses "$log0" 2>/dev/null | tail -1 | cut -d' ' -f1; }
  past_checkpoint() { local c; c=$(latest_step) || return 1; [ "$c" -ge 20 ] && [ "$(logged_step)" -gt "$c" ]; }
  wait_for 30 "pod $J-1's launcher" worker_pid $J-1 >/dev/null
  launcher=$(worker_pid $J-1)
  # The last rank: a child of pod 1's weft-run with RANK=WORLD-1.
  victim_pid() {
    local p
    for p in /proc/[0-9]*; do
      [ "$(cut -d' ' -f4 "$p/stat" 2>/dev/null)" = "$launcher" ] || continue  # its parent
      grep -qx "RANK=$((WORLD - 1))" <<<"$(tr '\0' '\n' < "$p/environ" 2>/dev/null)" && { echo "${p#/proc/}"; return 0; }
    done
    return 1
  }
  wait_for 30 "rank $((WORLD - 1)) in pod $J-1" victim_pid >/dev/null
  victim=$(victim_pid)
  attempt=$(tj_field $J .status.attempt)
  wait_for 120 "a logged step past a checkpoint at step >= 20" past_checkpoint
  at=$(latest_step)
  kill -9 "$victim" || fail "kill -9 $victim"
  log "killed rank $((WORLD - 1)) (pid $victim, in pod $J-1 beside rank $((WORLD - 2))) with a checkpoint at step $at"
  wait_for 60 "attempt $((attempt + 1))" tj_field_is $J .status.attempt $((attempt + 1))
  restarts=1
  exited() { grep -q "^$J-1 [^ ]* [0-9]" "$EXITS"; }
  wait_for 30 "pod $J-1 of attempt $attempt to exit" exited
  code1=$(grep -m1 "^$J-1 [^ ]* [0-9]" "$EXITS" | cut -d' ' -f3)
  log "pod $J-1 of attempt $attempt exited $code1 (its launcher reports the killed rank's code)"
  [ "$code1" = 137 ] || fail "pod $J-1 exited $code1, expected 137 (SIGKILL of one of its ranks)"
fi
wait_for 300 "phase Succeeded" phase_is $J Succeeded
log "Succeeded: $(kubectl get tj $J -n "$NS" --no-headers)"
[ "$(tj_field $J .status.restarts)" = $restarts ] || fail "restarts $(tj_field $J .status.restarts), expected $restarts"
codes=$(kubectl get pods -n "$NS" -o jsonpath='{range .items[*]}{.status.containerStatuses[0].state.terminated.exitCode}{" "}{end}')
[ "$codes" = "$(printf '0 %.0s' $(seq 1 $PODS))" ] || fail "exit codes: $codes"
if [ "$MODE" = dp ]; then
  resumed=$(sed -n 's/.*resumed from \/ckpt\/step-\([0-9]*\).*/\1/p' $(logs_of $J-0) | head -1)
  [ -n "$resumed" ] && [ "$resumed" -ge "$at" ] || fail "attempt 2 did not resume from step >= $at"
  log "attempt 2 resumed from step $resumed"
fi

match_weft_run $J $WORLD $STEPS '\[rank 0\] ' "$PODS pods x $PROCS"
[ "$(live_processes)" = 0 ] || fail "processes left behind"
log "PASS: $PODS pods x $PROCS ranks ($MODE) match weft-run -n $WORLD"
finish 0
