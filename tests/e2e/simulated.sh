#!/bin/bash
# weft-node's simulated pods (--simulate-pods, the mode the 1 024-rank
# benchmark runs on: tests/bench/operator_scale.sh) on the e2e cluster: a
# second agent serves one tainted Node in simulation; a 16-pod TrainingJob
# placed there reaches Running with no process started, status.progress is
# filled from the simulated ranks' canned /metrics (weft_rank_info naming the
# job's uid, attempt and pod, so the operator's check accepts them), a deleted
# pod restarts the gang (attempt 1, cause Deleted, which maxRestarts does not
# count), and a pod whose simulated container exits 3 restarts it again
# (cause Failure, which it counts).
# Usage: simulated.sh CLUSTER_DIR SOURCE_DIR BUILD_DIR
. "$(dirname "$0")/lib.sh" "$1" "$2" simulated
BIN=$3/bin
NODE=sim-$$
SIMDIR=$(mktemp -d /tmp/weft-e2e-sim.XXXXXX)
# Pod IPs apart from the fixture's agent (cluster.sh derives its octet from the cluster dir).
octet=$(( ($(printf '%s' "$CLUSTER" | cksum | cut -d' ' -f1) % 200 + 100) % 200 + 20 ))
"$BIN/weft-node" --kubeconfig "$KUBECONFIG" --state-dir "$SIMDIR/state" --nodes 1 --node-prefix "$NODE" \
  --taint weft.dev/simulated=true:NoSchedule --pod-ip-octet "$octet" --simulate-pods --simulated-step-seconds 0.2 \
  >"$SIMDIR/agent.log" 2>&1 &
AGENT=$!
stop_agent() {
  kill "$AGENT" 2>/dev/null; wait "$AGENT" 2>/dev/null
  kubectl delete node "$NODE-0" --wait=false >/dev/null 2>&1
  rm -rf "$SIMDIR"
}
fail() { echo "FAIL [$TEST]: $*" >&2; dump >&2; echo "---- simulated agent (last lines)" >&2; tail -15 "$SIMDIR/agent.log" >&2; stop_agent; finish 1; }
node_ready() { [ "$(kubectl get node "$NODE-0" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; }
wait_for 60 "simulated node Ready" node_ready

cat <<YAML | kubectl apply -n "$NS" -f - >/dev/null || fail "kubectl apply"
apiVersion: weft.dev/v1alpha1
kind: TrainingJob
metadata: {name: sim}
spec:
  replicas: 16
  image: weft:local
  worker: {preset: tiny}
  stragglers: {}
  restartPolicy: {backoffSeconds: 1, maxRestarts: 3}
  template:
    nodeSelector: {kubernetes.io/hostname: $NODE-0}
    tolerations: [{key: weft.dev/simulated, operator: Exists, effect: NoSchedule}]
YAML

running_pods() { kubectl get pods -n "$NS" -l weft.dev/job=sim,weft.dev/attempt="$1" \
  --field-selector status.phase=Running -o name 2>/dev/null | wc -l; }
all_running() { phase_is sim Running && [ "$(running_pods "$1")" = 16 ]; }
progress_of_attempt() {  # status.progress updated after the attempt started
  local step at start
  step=$(tj_field sim .status.progress.step); at=$(tj_field sim .status.progress.updatedAt)
  start=$(tj_field sim .status.attemptStartTime)
  [ "$(tj_field sim .status.attempt)" = "$1" ] && [ -n "$step" ] && [ "$step" -gt 0 ] && [[ "$at" > "$start" || "$at" == "$start" ]]
}
wait_for 120 "16 simulated pods Running, the job Running" all_running 0
log "16 pods Running on $NODE-0"
wait_for 120 "status.progress from the simulated ranks" progress_of_attempt 0
log "status.progress.step $(tj_field sim .status.progress.step), loss $(tj_field sim .status.progress.loss)"
# No process was started for them.
[ -z "$(ls "$SIMDIR/state/pods" 2>/dev/null)" ] || fail "the simulating agent kept pod state on disk"
[ "$(tj_field sim '.status.conditions[?(@.type=="MetricsAttributed")].status')" != False ] || fail "the operator refused the simulated metrics"

kubectl delete pod sim-3 -n "$NS" --wait=false >/dev/null || fail "kubectl delete pod"
attempt_is() { [ "$(tj_field sim .status.attempt)" = "$1" ]; }
wait_for 120 "a gang restart after the pod's deletion" attempt_is 1
wait_for 120 "attempt 1's 16 pods Running" all_running 1
[ "$(tj_field sim .status.restartsByCause.Deleted)" = 1 ] || fail "restartsByCause: $(tj_field sim .status.restartsByCause)"
wait_for 120 "status.progress of attempt 1" progress_of_attempt 1
log "pod deleted: gang restarted as attempt 1 (cause Deleted), progress step $(tj_field sim .status.progress.step)"

kubectl annotate pod sim-5 -n "$NS" weft-node.local/simulate-exit-code=3 >/dev/null || fail "kubectl annotate"
wait_for 120 "a gang restart after a simulated exit 3" attempt_is 2
wait_for 120 "attempt 2's 16 pods Running" all_running 2
[ "$(tj_field sim .status.restartsByCause.Failure)" = 1 ] || fail "restartsByCause: $(tj_field sim .status.restartsByCause)"
[ "$(tj_field sim .status.restartsByCause.Deleted)" = 1 ] || fail "restartsByCause: $(tj_field sim .status.restartsByCause)"
[ "$(tj_field sim .status.restarts)" = 2 ] || fail "restarts $(tj_field sim .status.restarts), expected 2"
log "PASS: simulated exit 3 restarted the gang as attempt 2 (cause Failure)"
kubectl delete tj sim -n "$NS" --wait=false >/dev/null
no_sim_pods() { [ "$(kubectl get pods -n "$NS" -o name 2>/dev/null | wc -l)" = 0 ]; }
wait_for 60 "pods gone" no_sim_pods
stop_agent
finish 0
