#!/bin/bash
# `kubectl delete tj` mid-training: every rank process is gone within the
# grace period (the workers checkpoint on SIGTERM) and nothing is left on the node.
. "$(dirname "$0")/lib.sh" "$1" "$2" delete-tj
watch_exits
apply_testdata long.yaml
wait_for 60 "phase Running" phase_is long Running
wait_for 120 "a checkpoint at step >= 40" ckpt_at_least 40
[ "$(live_processes)" = 2 ] || fail "expected 2 live rank processes, found $(live_processes)"
uid0=$(pod_uid long-0) || fail "no uid for pod long-0"
t=$(date +%s%N)
kubectl delete tj long -n "$NS" --wait=false >/dev/null || fail "kubectl delete tj"
wait_for 30 "no rank process left" live_processes_are 0
gone_ms=$(( ($(date +%s%N) - t) / 1000000 ))
wait_for 30 "no pods left" no_pods
pods_ms=$(( ($(date +%s%N) - t) / 1000000 ))
code=$(exit_code_of long-0)
[ "$code" = 143 ] || fail "rank 0 exited $code, expected 143 (SIGTERM after a checkpoint)"
no_leftovers() { [ -z "$(pod_leftovers)" ]; }
wait_for_quiet 30 no_leftovers
left=$(pod_leftovers)
[ -z "$left" ] || fail "pod directories left on the node: $left"
log "PASS: processes gone ${gone_ms} ms after kubectl delete tj (exit 143), pods gone after ${pods_ms} ms"
finish 0
