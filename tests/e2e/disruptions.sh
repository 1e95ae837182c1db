#!/bin/bash
# One 2-rank job struck in turn by every disruption a gang meets on a
# cluster, then checked against one uninterrupted `weft-run -n 2`: every loss
# any attempt's rank 0 logged equals that run's, and the job succeeds.
#
# The job is ZeRO-2 with async checkpoints (sharded files written in the
# background, the default on GPUs) every 5 steps, so a write is often in
# flight at a strike, and maxRestarts 1, so only the strike that counts may
# count. In order:
#  1. `kill -9` of rank 1's worker: rank 0 exits 3 (peer lost) without
#     hanging; the operator restarts the gang (counted: Failure), which
#     resumes from the latest checkpoint and continues the step count.
#  2. `kubectl delete pod` of rank 1: rank 1 stops on SIGTERM at a step both
#     ranks agree on and checkpoints it; rank 0 ends with a retryable code;
#     the restart is not counted (Deleted) and resumes from that step.
#  3. Eviction through the eviction API (what `kubectl drain` and autoscalers
#     use): both ranks stop at the step they agree on and checkpoint it; the
#     restart is not counted, with no backoff: "Evicted", from the
#     DisruptionTarget condition the API server (>= 1.26) puts on the pod.
#     A counted delete or eviction would be the
#     second counted restart and fail the job.
#  4. spec.suspend (the contract Kueue drives): the pods are deleted, the
#     workers stop on SIGTERM at an agreed step, publish the write in flight
#     and checkpoint the step they stopped at (exit 143) within the job's own
#     terminationGracePeriodSeconds; the job is Suspended with no pods and no
#     process left. Patched back, it resumes from that checkpoint as a new
#     attempt, no restart counted.
#  5. weft-operator crashes (SIGKILL) and comes back: the ranks train on
#     undisturbed while it is down, and the restarted operator adopts the
#     running gang from its watch caches (same pods, same attempt, no restart)
#     and marks the job Succeeded when the ranks finish.
# Usage: disruptions.sh CLUSTER_DIR SOURCE_DIR BUILD_DIR
. "$(dirname "$0")/lib.sh" "$1" "$2" disruptions
BUILD=$3 BIN=$3/bin
cluster() { "$SRC/localcluster/cluster.sh" "$1" "$CLUSTER" "$BUILD" >/dev/null; }
trap 'kill -0 "$(cat "$CLUSTER/weft-operator.pid" 2>/dev/null)" 2>/dev/null || cluster operator-start' EXIT
# Each strike needs about a dozen steps of the attempt before it (a
# checkpoint to resume from, steps logged past it); what is left after the
# last one keeps the ranks training while the operator is down. The ranks
# run 10-15 steps a second and this script's own calls (kubectl, the
# operator's reaction) take seconds on a loaded host, where the first strike
# lands past step 80 and the fourth past step 140: 300 steps leave every
# strike a running gang to strike.
STEPS=300
GAP=12
watch_exits
apply_testdata resume.yaml "s/steps: 120, log_every: 5/steps: $STEPS, log_every: 1/" \
  "s/checkpoint: {dir: \/ckpt, every: 40}/checkpoint: {dir: \/ckpt, every: 5, async: true}/" \
  "s/parallel: {strategy: dp, bucket_cap_mb: 1}/parallel: {strategy: zero, bucket_cap_mb: 1, zero: {stage: 2}}/" \
  "s/maxRestarts: 2, backoffSeconds: 1/maxRestarts: 1, backoffSeconds: 1/" \
  "s/^  template:$/  template:\n    terminationGracePeriodSeconds: 120/"
[ "$(tj_field resume .spec.worker.train.steps)" = $STEPS ] || fail "step override not applied"
[ "$(tj_field resume .spec.worker.checkpoint.async)" = true ] || fail "checkpoint.async override not applied"
[ "$(tj_field resume .spec.worker.parallel.strategy)" = zero ] || fail "strategy override not applied"
[ "$(tj_field resume .spec.restartPolicy.maxRestarts)" = 1 ] || fail "maxRestarts override not applied"

# The pod of RANK in attempt ATTEMPT runs (the label says which attempt).
pod_of_attempt() {
  [ "$(kubectl get pod "resume-$1" -n "$NS" -o jsonpath='{.metadata.labels.weft\.dev/attempt} {.status.phase}' \
       2>/dev/null)" = "$2 Running" ]
}
# attempt_logged ATTEMPT N: waits for attempt ATTEMPT's ranks to run and its
# rank 0 to log step N; sets uid0 and log0 to that pod's uid and log.
attempt_logged() {
  local a=$1 n=$2
  wait_for 90 "attempt $a's rank 0" pod_of_attempt 0 "$a"
  wait_for 30 "attempt $a's rank 1" pod_of_attempt 1 "$a"
  uid0=$(pod_uid resume-0) || fail "no uid for pod resume-0"
  log0=$(log_path_of resume-0 "$uid0")
  wait_for 150 "attempt $a: step $n logged" _past "$n"
}
logged_step() { step_losses $STEPS '' "$log0" 2>/dev/null | tail -1 | cut -d' ' -f1; }
_past() { [ "$(logged_step)" -ge "$1" ] 2>/dev/null; }
resumed_from() { sed -n 's/.*resumed from \/ckpt\/step-\([0-9]*\).*/\1/p' "$log0" | head -1; }
exit_code_of_rank0() {  # of the attempt whose log is log0 (pod uid0)
  _exited() { [ -n "$(exit_code_of_uid "$uid0")" ]; }
  wait_for 60 "rank 0's exit" _exited
  exit_code_of_uid "$uid0"
}
# The step rank 0 stopped at and checkpointed, from its stop line.
stop_line() { sed -n 's/.*stopped .*at step \([0-9]*\)[; ].*checkpoint \/ckpt.*/\1/p' "$log0" | tail -1; }
# check_resumed ATTEMPT FROM: attempt ATTEMPT resumed from step FROM exactly
# (or, with "FROM+", from FROM or later) and continued the step count.
check_resumed() {
  local a=$1 want=$2 got first
  got=$(resumed_from)
  case $want in
    *+) [ -n "$got" ] && [ "$got" -ge "${want%+}" ] || fail "attempt $a resumed from '$got', expected >= ${want%+}" ;;
    *) [ "$got" = "$want" ] || fail "attempt $a resumed from '$got', expected $want" ;;
  esac
  first=$(step_losses $STEPS '' "$log0" | head -1 | cut -d' ' -f1)
  [ -n "$first" ] && [ "$first" -gt "$got" ] || fail "attempt $a: step count restarted ($first after resuming $got)"
  log "attempt $a resumed from step $got (first logged step $first)"
}
restarts_are() { [ "$(tj_field resume .status.restarts)" = "$1" ] || fail "restarts $(tj_field resume .status.restarts), expected $1"; }

# 1. kill -9 of rank 1, between checkpoints.
wait_for 60 "phase Running" phase_is resume Running
attempt=$(tj_field resume .status.attempt)
[ -n "$attempt" ] || fail "no status.attempt while Running"
attempt_logged "$attempt" "$GAP"
pid=$(worker_pid resume-1) || fail "no process of rank 1"
past_checkpoint() { local c; c=$(latest_step) || return 1; [ "$(logged_step)" -gt "$c" ]; }
wait_for 60 "a logged step past a checkpoint" past_checkpoint
at=$(latest_step)
kill -9 "$pid" || fail "kill -9 $pid"
log "1. killed rank 1 (pid $pid) at logged step $(logged_step), checkpoint at step $at"
code0=$(exit_code_of_rank0)
[ "$code0" = 3 ] || fail "rank 0 exited $code0, expected 3 (peer lost)"
wait_for 60 "attempt $((attempt + 1))" tj_field_is resume .status.attempt $((attempt + 1))
attempt=$((attempt + 1))
restarts_are 1
[ "$(tj_field resume .status.lastRestartCause)" = Failure ] || fail "lastRestartCause $(tj_field resume .status.lastRestartCause)"
attempt_logged "$attempt" $((at + 1))
check_resumed "$attempt" "$at+"

# 2. kubectl delete pod of rank 1.
wait_for 120 "attempt $attempt: $GAP steps" _past $(($(resumed_from) + GAP))
at=$(latest_step)
kubectl delete pod resume-1 -n "$NS" --wait=false >/dev/null || fail "kubectl delete pod"
log "2. deleted pod resume-1 at logged step $(logged_step), checkpoint at step $at"
code0=$(exit_code_of_rank0)
# Rank 1 stops on SIGTERM at a step both ranks agree on, and the operator
# deletes the whole gang at once, so rank 0 ends with 3, 143 (its own SIGTERM)
# or 128 (a stop its peer asked for); any retryable code (not 0 or 1) will do.
# With an agreed stop, rank 0 logged it and the next attempt resumes from
# that very step; with exit 3 it lost its peer first, and the next attempt
# resumes from the latest checkpoint.
case $code0 in 0 | 1) fail "rank 0 exited $code0 after its peer's pod was deleted" ;; esac
stopped=$(stop_line)
log "rank 0 exited $code0${stopped:+ after stopping at step $stopped with its peer}"
wait_for 60 "attempt $((attempt + 1))" tj_field_is resume .status.attempt $((attempt + 1))
attempt=$((attempt + 1))
restarts_are 2
attempt_logged "$attempt" $((${stopped:-$at} + 1))
check_resumed "$attempt" "${stopped:-$at+}"

# 3. Eviction of rank 1.
wait_for 120 "attempt $attempt: $GAP steps" _past $(($(resumed_from) + GAP))
printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"resume-1","namespace":"%s"}}' "$NS" \
  | kubectl create --raw "/api/v1/namespaces/$NS/pods/resume-1/eviction" -f - >/dev/null \
  || fail "the eviction API refused to evict resume-1"
log "3. evicted resume-1 at logged step $(logged_step)"
stopped_at_checkpoint() { [ -n "$(stop_line)" ]; }
wait_for 30 "rank 0's stop at a checkpoint" stopped_at_checkpoint
stopped=$(stop_line)
wait_for 60 "attempt $((attempt + 1))" tj_field_is resume .status.attempt $((attempt + 1))
attempt=$((attempt + 1))
restarts_are 3
log "restarting: $(tj_field resume .status.restartsByCause)"
echo "---- kubectl get tj resume (restarting after the eviction)"
kubectl get tj resume -n "$NS"
attempt_logged "$attempt" $((stopped + 1))
check_resumed "$attempt" "$stopped"
[ "$(tj_field resume .status.phase)" != Failed ] || fail "an uncounted restart failed the job"

# 4. Suspend, then resume.
wait_for 120 "attempt $attempt: $GAP steps" _past $(($(resumed_from) + GAP))
grace=$(kubectl get pod resume-0 -n "$NS" -o jsonpath='{.spec.terminationGracePeriodSeconds}')
[ "$grace" = 120 ] || fail "pod resume-0 has terminationGracePeriodSeconds '$grace', expected the template's 120"
kubectl patch tj resume -n "$NS" --type merge -p '{"spec":{"suspend":true}}' >/dev/null || fail "kubectl patch suspend"
log "4. suspended at logged step $(logged_step)"
wait_for 60 "phase Suspended" phase_is resume Suspended
wait_for 60 "no pods" no_pods
code0=$(exit_code_of_rank0)
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
[ "$(live_processes)" = 0 ] || fail "processes left behind while suspended"
log "both ranks stopped at step $stopped and checkpointed it; no pods left"
echo "---- kubectl describe tj resume (suspended)"
kubectl describe tj resume -n "$NS" | sed -n '/^Status:/,$p'
kubectl patch tj resume -n "$NS" --type merge -p '{"spec":{"suspend":false}}' >/dev/null || fail "kubectl patch resume"
wait_for 60 "attempt $((attempt + 1))" tj_field_is resume .status.attempt $((attempt + 1))
attempt=$((attempt + 1))
restarts_are 3
attempt_logged "$attempt" $((stopped + 1))
check_resumed "$attempt" "$stopped"

# 5. weft-operator crashes and comes back.
wait_for 120 "attempt $attempt: a checkpoint past the resume" ckpt_at_least $(($(resumed_from) + 5))
uids() { kubectl get pods -n "$NS" -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid}{"\n"}{end}' | sort; }
before=$(uids)
[ "$(echo "$before" | grep -c .)" = 2 ] || fail "expected 2 pods before the crash: $before"
cluster operator-kill || fail "cannot kill weft-operator"
log "5. weft-operator killed at logged step $(logged_step)"
sleep 2
# The ranks train on. Each look reads pid files with python3, which a loaded
# machine can fail to start, so a miss is looked at again for a few seconds;
# ranks that finished the run meanwhile are no failure either: one the crash
# had taken down would not have written the final checkpoint.
ranks_train_on() { [ "$(live_processes)" = 2 ] || [ "$(latest_step || echo 0)" = $STEPS ]; }
wait_for_quiet 10 ranks_train_on ||
  fail "ranks stopped while the operator was down ($(live_processes) running, latest checkpoint step $(latest_step))"
[ "$(uids)" = "$before" ] || fail "pods changed while the operator was down: $(uids)"
cluster operator-start || fail "cannot restart weft-operator"
log "weft-operator restarted at logged step $(logged_step)"
[ "$(latest_step)" -lt $STEPS ] || log "note: the ranks finished before the operator came back (a slow machine); adoption of running pods not exercised"

wait_for 300 "phase Succeeded" phase_is resume Succeeded
log "Succeeded: $(kubectl get tj resume -n "$NS" --no-headers)"
[ "$(uids)" = "$before" ] || fail "pods recreated after the operator restart: before $before, after $(uids)"
[ "$(tj_field resume .status.attempt)" = "$attempt" ] || fail "attempt $(tj_field resume .status.attempt), expected $attempt"
restarts_are 3
by_cause=$(tj_field resume .status.restartsByCause)
[ "$(tj_field resume .status.restartsByCause.Failure)" = 1 ] && [ "$(tj_field resume .status.restartsByCause.Deleted)" = 1 ] \
  && [ "$(tj_field resume .status.restartsByCause.Evicted)" = 1 ] \
  || fail "restartsByCause $by_cause, expected Failure: 1 (the kill), Deleted: 1 (the delete), Evicted: 1 (the eviction)"
[ "$(tj_field resume .status.progress.step)" = $STEPS ] || fail "status.progress: $(tj_field resume .status.progress)"
[ "$(cat "$CKPT/latest")" = step-$STEPS ] || fail "final checkpoint $(cat "$CKPT/latest")"
echo "---- kubectl describe tj resume (struck five times and done)"
kubectl describe tj resume -n "$NS" | sed -n '/^Status:/,$p'
match_weft_run resume 2 $STEPS '' "2 ranks struck five times over $attempt attempts"
[ "$(live_processes)" = 0 ] || fail "processes left behind"
log "PASS: killed, deleted, evicted, suspended, operator restarted; $by_cause; same losses as an uninterrupted run"
finish 0
