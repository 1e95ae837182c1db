#!/bin/bash
# Fault: weft-operator crashes (SIGKILL) mid-training and comes back.
# Expected: the ranks train on undisturbed while it is down; the restarted
# operator adopts the running gang from its watch caches (no duplicate pods,
# no restart, same attempt) and marks the job Succeeded when the ranks finish.
# Usage: operator_restart.sh CLUSTER_DIR SOURCE_DIR BUILD_DIR
. "$(dirname "$0")/lib.sh" "$1" "$2" operator-restart
BUILD=$3
cluster() { "$SRC/tests/kube/cluster.sh" "$1" "$CLUSTER" "$BUILD" >/dev/null; }
trap 'kill -0 "$(cat "$CLUSTER/weft-operator.pid" 2>/dev/null)" 2>/dev/null || cluster operator-start' EXIT
# resume.yaml with twice the steps, so that the ranks still train when the
# operator comes back.
apply_testdata resume.yaml 's/steps: 120/steps: 240/'
[ "$(tj_field resume .spec.worker.train.steps)" = 240 ] || fail "step override not applied"
wait_for 60 "phase Running" phase_is resume Running
wait_for 120 "a checkpoint at step >= 40" ckpt_at_least 40
attempt=$(tj_field resume .status.attempt)
uids() { kubectl get pods -n "$NS" -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid}{"\n"}{end}' | sort; }
before=$(uids)
[ "$(echo "$before" | grep -c .)" = 2 ] || fail "expected 2 pods before the crash: $before"
cluster operator-kill || fail "cannot kill weft-operator"
log "weft-operator killed at checkpoint step $(latest_step)"
sleep 2
# The ranks train on. Each look reads pid files with python3, which a loaded
# machine can fail to start, so a miss is looked at again for a few seconds
# (no rank comes back while the operator is down); ranks that finished the
# run meanwhile are no failure either: one the crash had taken down would not
# have written the final checkpoint.
ranks_train_on() { [ "$(live_processes)" = 2 ] || [ "$(latest_step || echo 0)" = 240 ]; }
wait_for_quiet 10 ranks_train_on ||
  fail "ranks stopped while the operator was down ($(live_processes) running, latest checkpoint step $(latest_step))"
[ "$(uids)" = "$before" ] || fail "pods changed while the operator was down: $(uids)"
cluster operator-start || fail "cannot restart weft-operator"
log "weft-operator restarted at checkpoint step $(latest_step)"
[ "$(latest_step)" -lt 240 ] || log "note: the ranks finished before the operator came back (a slow machine); adoption of running pods not exercised"
wait_for 240 "phase Succeeded" phase_is resume Succeeded
[ "$(uids)" = "$before" ] || fail "pods recreated after the operator restart: before $before, after $(uids)"
[ "$(tj_field resume .status.restarts)" = 0 ] || fail "restarts $(tj_field resume .status.restarts), expected 0"
[ "$(tj_field resume .status.attempt)" = "$attempt" ] || fail "attempt $(tj_field resume .status.attempt), expected $attempt"
[ "$(cat "$CKPT/latest")" = step-240 ] || fail "final checkpoint $(cat "$CKPT/latest")"
log "PASS: the restarted operator adopted the gang: $(kubectl get tj resume -n "$NS" --no-headers)"
finish 0
