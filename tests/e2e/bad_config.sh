#!/bin/bash
# Fault: a worker config the schema accepts but the worker refuses (exit 1).
# Expected: phase Failed without any restart, the worker's message in the
# pod's termination message.
. "$(dirname "$0")/lib.sh" "$1" "$2" bad-config
apply_testdata bad-config.yaml
wait_for 90 "phase Failed" phase_is bad-config Failed
log "Failed: $(kubectl get tj bad-config -n "$NS" --no-headers)"
[ "$(tj_field bad-config .status.restarts)" = 0 ] || fail "restarted: $(tj_field bad-config .status.restarts)"
attempts=$(kubectl get pods -n "$NS" -o jsonpath='{.items[*].metadata.labels.weft\.dev/attempt}' | tr ' ' '\n' | sort -u)
[ "$attempts" = "$(tj_field bad-config .status.attempt)" ] || fail "pods of attempts '$attempts', job at $(tj_field bad-config .status.attempt)"
msg=$(kubectl get tj bad-config -n "$NS" -o jsonpath='{.status.conditions[?(@.type=="Failed")].message}')
grep -q "code 1" <<<"$msg" || fail "Failed condition does not name exit code 1: $msg"
grep -q "does not divide model.d_model 130" <<<"$msg" || fail "Failed condition lacks the worker's message: $msg"
pmsg=$(kubectl get pods -n "$NS" -o jsonpath='{.items[*].status.containerStatuses[0].state.terminated.message}')
grep -q "does not divide model.d_model 130" <<<"$pmsg" || fail "worker message not in the pod status: $pmsg"
log "condition: $msg"
log "PASS: Failed, no restart, worker's message in the pod's termination message and the Failed condition"
finish 0
