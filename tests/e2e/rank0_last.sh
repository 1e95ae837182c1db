#!/bin/bash
# Rank 0 (the rendezvous store host) starts last: the cluster's weft-node
# admits this test's pod late-0 10 s after it is bound (--start-delay, set by
# tests/e2e/CMakeLists.txt), so it stays Pending without an IP while rank 1
# already runs and cannot even resolve rank 0's name. Expected: rank 1 waits
# and says why in its log, the rendezvous completes once rank 0 starts, the
# job succeeds without a restart.
. "$(dirname "$0")/lib.sh" "$1" "$2" rank0-last
apply_testdata late-rank0.yaml
wait_for 60 "rank 1's process" worker_pid late-1 >/dev/null
rank0_has_ip() { [ -n "$(kubectl get pod late-0 -n "$NS" -o jsonpath='{.status.podIP}' 2>/dev/null)" ]; }
rank0_has_ip && fail "rank 0 got an IP before rank 1 started; the start delay did not apply"
log "rank 1 runs, rank 0 is $(kubectl get pod late-0 -n "$NS" -o jsonpath='{.status.phase}') without an IP"
wait_for 60 "rank 0's IP" rank0_has_ip
log "rank 0 admitted"
wait_for 180 "phase Succeeded" phase_is late Succeeded
[ "$(tj_field late .status.restarts)" = 0 ] || fail "restarts $(tj_field late .status.restarts), expected 0"
log1=$(logs_of late-1 | tail -1)
grep -q "rendezvous: waiting for rank 0" "$log1" || fail "rank 1 did not log why it waited: $(head -20 "$log1")"
log "rank 1: $(grep -m1 'rendezvous: waiting for rank 0' "$log1")"
log "PASS: rank 0 started last and the gang trained: $(kubectl get tj late -n "$NS" --no-headers)"
finish 0
