#!/bin/bash
# Fault: worker configs the schema accepts but the worker refuses.
# bad-config can only be refused inside the pod (init_from names no directory
# there): phase Failed without any restart, the worker's exit 1 and message in
# the pod's termination message. bad-shape breaks a rule of the worker's
# config that the operator applies with the worker's own parser: phase Failed
# (InvalidSpec) naming spec.worker.model.n_heads in the worker's words, and no
# pod ever.
. "$(dirname "$0")/lib.sh" "$1" "$2" bad-config
apply_testdata bad-config.yaml
wait_for 90 "phase Failed" phase_is bad-config Failed
log "Failed: $(kubectl get tj bad-config -n "$NS" --no-headers)"
[ "$(tj_field bad-config .status.restarts)" = 0 ] || fail "restarted: $(tj_field bad-config .status.restarts)"
attempts=$(kubectl get pods -n "$NS" -o jsonpath='{.items[*].metadata.labels.weft\.dev/attempt}' | tr ' ' '\n' | sort -u)
[ "$attempts" = "$(tj_field bad-config .status.attempt)" ] || fail "pods of attempts '$attempts', job at $(tj_field bad-config .status.attempt)"
msg=$(kubectl get tj bad-config -n "$NS" -o jsonpath='{.status.conditions[?(@.type=="Failed")].message}')
grep -q "code 1" <<<"$msg" || fail "Failed condition does not name exit code 1: $msg"
grep -q "/models/absent: not a directory" <<<"$msg" || fail "Failed condition lacks the worker's message: $msg"
pmsg=$(kubectl get pods -n "$NS" -l weft.dev/job=bad-config -o jsonpath='{.items[*].status.containerStatuses[0].state.terminated.message}')
grep -q "/models/absent: not a directory" <<<"$pmsg" || fail "worker message not in the pod status: $pmsg"
log "condition: $msg"
wait_for 30 "bad-shape Failed" phase_is bad-shape Failed
smsg=$(kubectl get tj bad-shape -n "$NS" -o jsonpath='{.status.conditions[?(@.type=="Failed")].reason}: {.status.conditions[?(@.type=="Failed")].message}')
grep -q "^InvalidSpec: .*spec.worker.model.n_heads: 4 does not divide model.d_model 130" <<<"$smsg" ||
  fail "bad-shape not refused in the worker's words at its field: $smsg"
[ -z "$(kubectl get pods -n "$NS" -l weft.dev/job=bad-shape -o name)" ] || fail "bad-shape has pods"
log "bad-shape: $smsg"
log "PASS: Failed, no restart, worker's message in the pod's termination message and the Failed condition; a rule of the worker's config refused by the operator before any pod"
finish 0
