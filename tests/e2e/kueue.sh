#!/bin/bash
# TrainingJobs queued by the real Kueue (localcluster/kueue.sh: the v0.17.0
# manager the fixture starts; the operator runs with --kueue, the chart's
# operator.kueue). Each mode applies the examples (manifests/examples/kueue/:
# a ResourceFlavor, a ClusterQueue, LocalQueue, priority classes and a
# queued tiny-cpu job) renamed for its namespace.
#   admission   Three jobs over a quota that fits one: the first is admitted,
#               its pods go where the flavor's nodeLabels say, the others are
#               Queued with Kueue's reason in their status (kubectl get tj
#               shows Queued) and no pod; as each finishes (its Workload
#               Finished) the next in submission order is admitted; all three
#               succeed.
#   preemption  A low-priority job trains with checkpoints; a high-priority
#               job arrives and Kueue preempts the low one: its gang stops the
#               way a suspend stops it (each rank checkpoints the step it
#               stopped at), no pod is left, the high job runs and finishes,
#               the low one is admitted again and resumes from that
#               checkpoint as a new attempt, with the losses of one
#               uninterrupted `weft-run -n 2`.
#   pods-ready  All or nothing (waitForPodsReady, 30 s in the fixture): a gang
#               of which only one pod can run (the other node cordoned) is
#               evicted by Kueue, its running pod deleted rather than left
#               half-running, and requeued; with the node back it is
#               admitted again and succeeds.
# Usage: kueue.sh CLUSTER_DIR SOURCE_DIR BUILD_DIR MODE
MODE=$4
. "$(dirname "$0")/lib.sh" "$1" "$2" "kueue-$MODE"
BIN=$3/bin
IMAGE=ghcr.io/weft-dev/weft-worker:0.1.0-cpu
kubectl get crd workloads.kueue.x-k8s.io >/dev/null 2>&1 || fail "Kueue's CRDs are not installed (WEFT_CLUSTER_KUEUE=1)"
[ -f "$CLUSTER/kueue.pid" ] && kill -0 "$(cat "$CLUSTER/kueue.pid")" 2>/dev/null || fail "Kueue's manager is not running"
CORDONED="" LABELLED=""
cleanup() {
  kubectl delete clusterqueue "$NS" --wait=false >/dev/null 2>&1
  kubectl delete resourceflavor "$NS" --wait=false >/dev/null 2>&1
  kubectl delete workloadpriorityclass "$NS-low" "$NS-high" >/dev/null 2>&1
  [ -n "$CORDONED" ] && kubectl uncordon "$CORDONED" >/dev/null 2>&1
  [ -n "$LABELLED" ] && kubectl label node "$LABELLED" weft.dev/e2e-pool- >/dev/null 2>&1
}
trap cleanup EXIT

# The queues and jobs are the examples (manifests/examples/kueue/), renamed
# for this test: cluster-scoped names get the namespace's, the ClusterQueue
# admits this namespace only.
EX=$SRC/manifests/examples/kueue
# queues CPU MEMORY [NODE_LABEL]: the flavor (with nodeLabels when given),
# the ClusterQueue with that quota (preempting lower priorities), LocalQueue q
# and the priority classes $NS-low and $NS-high.
queues() {
  local flavor='s/^spec: {} .*/spec: {}/'
  [ -n "${3:-}" ] && flavor="s#^spec: {} .*#spec: {nodeLabels: {weft.dev/e2e-pool: $3}}#"
  sed -e "s/default-flavor/$NS/g" -e "s/weft-cluster-queue/$NS/g" -e "s/weft-low/$NS-low/" -e "s/weft-high/$NS-high/" \
      -e "s/name: user-queue/name: q/" -e "s/namespace: default/namespace: $NS/" \
      -e "s#namespaceSelector: {} .*#namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: $NS}}#" \
      -e "s/{name: cpu, nominalQuota: \"1\"}/{name: cpu, nominalQuota: \"$1\"}/" \
      -e "s/{name: memory, nominalQuota: 1Gi}/{name: memory, nominalQuota: $2}/" -e "$flavor" "$EX/queues.yaml" \
    | kubectl apply -f - >/dev/null || fail "applying the queues"
  [ "$(kubectl get clusterqueue "$NS" -o jsonpath='{.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota}')" = "$1" ] \
    || fail "the ClusterQueue's cpu quota is not $1"
}
# job NAME STEPS CPU [PRIORITY_CLASS] [EXTRA_YAML]: kueue/tiny-cpu.yaml in queue q
# (EXTRA_YAML appended: lines of spec.worker, then of spec).
job() {
  local prio="/priority-class: weft-low/d"
  [ -n "${4:-}" ] && prio="s/priority-class: weft-low/priority-class: $4/"
  { sed -e "s/name: tiny-queued/name: $1/" -e "s/queue-name: user-queue/queue-name: q/" -e "$prio" \
        -e "s/steps: 200}/steps: $2, log_every: 1}/" -e "s/cpu: 500m/cpu: $3/" "$EX/tiny-cpu.yaml"
    if [ -n "${5:-}" ]; then echo "$5"; fi; } | kubectl apply -n "$NS" -f - >/dev/null || fail "applying job $1"
  [ "$(tj_field "$1" .spec.worker.train.steps)" = "$2" ] || fail "job $1: step override not applied"
}
admitted() { tj_field "$1" '.status.conditions[?(@.type=="Admitted")].'"$2"; }
admitted_is() { [ "$(admitted "$1" status)" = "$2" ]; }
pods_of() { kubectl get pods -n "$NS" -l "weft.dev/job=$1" -o name 2>/dev/null | grep -c .; }
no_pods_of() { [ "$(pods_of "$1")" = 0 ]; }
workload_of() { kubectl get workloads -n "$NS" -l "weft.dev/job=$1" -o jsonpath="{.items[0]$2}" 2>/dev/null; }
workload_cond() { workload_of "$1" '.status.conditions[?(@.type=="'"$2"'")].status'; }
workload_cond_is() { [ "$(workload_cond "$1" "$2")" = "$3" ]; }

case $MODE in
admission)
  NODE=$(kubectl get nodes -o jsonpath='{.items[-1].metadata.name}')
  kubectl label node "$NODE" "weft.dev/e2e-pool=$NS" --overwrite >/dev/null || fail "labelling $NODE"
  LABELLED=$NODE
  queues 1 1Gi "$NS"   # two pods of 500m/512Mi: one job at a time
  job first 150 500m
  wait_for 60 "first admitted" admitted_is first True
  log "first: $(admitted first message)"
  [ "$(workload_of first .spec.podSets[0].count)" = 2 ] || fail "first's Workload: $(workload_of first .spec)"
  [ "$(workload_of first .metadata.ownerReferences[0].name)" = first ] || fail "first's Workload is not owned by it"
  wait_for 90 "first Running" phase_is first Running
  for p in first-0 first-1; do
    sel=$(kubectl get pod "$p" -n "$NS" -o jsonpath='{.spec.nodeSelector.weft\.dev/e2e-pool} {.spec.nodeName}')
    [ "$sel" = "$NS $NODE" ] || fail "pod $p: nodeSelector and node '$sel', expected the flavor's '$NS $NODE'"
  done
  log "first's pods run on $NODE, the node the flavor's nodeLabels name"
  job second 30 500m
  wait_for 30 "second Queued" phase_is second Queued
  sleep 1  # a later creation time: Kueue's queues are FIFO by it
  job third 30 500m
  wait_for 30 "third Queued" phase_is third Queued
  wait_for 30 "Kueue's reason on second" eval '[[ "$(admitted second message)" == *"insufficient unused quota"* ]]'
  log "second: $(admitted second reason): $(admitted second message)"
  phase_is first Running || fail "first is $(tj_field first .status.phase) while second waits"
  no_pods_of second || fail "second has pods while it waits for admission"
  no_pods_of third || fail "third has pods while it waits for admission"
  kubectl get tj -n "$NS" | tee /dev/stderr | grep -q '^second *Queued' || fail "kubectl get tj does not show second Queued"
  kubectl get events -n "$NS" --field-selector involvedObject.name=second -o jsonpath='{.items[*].reason}' \
    | grep -q WaitingForAdmission || fail "no WaitingForAdmission event on second"
  wait_for 120 "first Succeeded" phase_is first Succeeded
  wait_for 30 "first's Workload Finished" workload_cond_is first Finished True
  wait_for 60 "second admitted" admitted_is second True
  done_at=$(tj_field first .status.completionTime)
  admitted_at=$(admitted second lastTransitionTime)
  [[ "$admitted_at" > "$done_at" || "$admitted_at" = "$done_at" ]] \
    || fail "second admitted at $admitted_at, before first finished at $done_at"
  phase_is third Queued || fail "third is $(tj_field third .status.phase) while second runs"
  wait_for 120 "second Succeeded" phase_is second Succeeded
  wait_for 30 "second's Workload Finished" workload_cond_is second Finished True
  wait_for 60 "third admitted" admitted_is third True
  done2=$(tj_field second .status.completionTime) admitted3=$(admitted third lastTransitionTime)
  [[ "$admitted3" > "$done2" || "$admitted3" = "$done2" ]] || fail "third admitted at $admitted3, before second finished at $done2"
  wait_for 120 "third Succeeded" phase_is third Succeeded
  log "PASS: first admitted and placed by its flavor; second and third Queued (WaitingForAdmission), admitted in their order as quota freed (first done $done_at, second admitted $admitted_at and done $done2, third admitted $admitted3); all Succeeded"
  ;;

preemption)
  STEPS=200
  queues 1 1Gi
  CKPT=$CLUSTER/ckpt/$NS
  rm -rf "$CKPT"; mkdir -p "$CKPT"; chmod 0777 "$CKPT"
  watch_exits
  job low $STEPS 500m "$NS-low" "    checkpoint: {dir: /ckpt, every: 5}
  template:
    terminationGracePeriodSeconds: 120
    volumes: [{name: ckpt, hostPath: {path: $CKPT, type: DirectoryOrCreate}}]
    volumeMounts: [{name: ckpt, mountPath: /ckpt}]"
  [ "$(workload_of low .spec.priority)" = 100 ] || fail "low's Workload priority: $(workload_of low .spec.priority)"
  wait_for 90 "low Running" phase_is low Running
  uid0=$(pod_uid low-0) || fail "no uid for low-0"
  log0=$(log_path_of low-0 "$uid0")
  logged_step() { step_losses $STEPS '' "$log0" 2>/dev/null | tail -1 | cut -d' ' -f1; }
  past() { [ "$(logged_step)" -ge "$1" ] 2>/dev/null; }
  wait_for 120 "low past step 20" past 20
  attempt=$(tj_field low .status.attempt)
  job high 30 500m "$NS-high"
  log "high submitted while low is at step $(logged_step)"
  wait_for 60 "low evicted" eval '[ "$(admitted low reason)" = Evicted ]'
  log "low: $(admitted low message)"
  [[ "$(admitted low message)" == *Preempted* ]] || fail "low's eviction is not a preemption: $(admitted low message)"
  wait_for 60 "low's pods gone" no_pods_of low
  phase_is low Queued || fail "low is $(tj_field low .status.phase), expected Queued"
  _exited() { [ -n "$(exit_code_of_uid "$uid0")" ]; }
  wait_for 60 "low-0's exit" _exited
  [ "$(exit_code_of_uid "$uid0")" = 143 ] || fail "low-0 exited $(exit_code_of_uid "$uid0"), expected 143 (SIGTERM after a checkpoint)"
  # Rank 0 stops on its own SIGTERM or because rank 1 got its first (the
  # kubelets deliver them apart); either way at the step they agree on.
  stopped=$(sed -n 's/.*\[warning\] stopped \(by signal 15 \)\{0,1\}at step \([0-9]*\).*; checkpoint \/ckpt\/step-.*/\2/p' "$log0" | tail -1)
  [ -n "$stopped" ] || fail "low-0 did not checkpoint at the stop: $(tail -3 "$log0")"
  [ "$(latest_step)" = "$stopped" ] || fail "latest checkpoint step-$(latest_step), low-0 stopped at $stopped"
  log "low stopped at step $stopped and checkpointed it; no pod left"
  wait_for 60 "high admitted" admitted_is high True
  wait_for 120 "high Succeeded" phase_is high Succeeded
  wait_for 60 "low admitted again" admitted_is low True
  [ "$(tj_field low .status.attempt)" -gt "$attempt" ] || fail "low's attempt is still $attempt"
  [ "$(tj_field low .status.restarts)" = 0 ] || fail "the preemption counted as a restart: $(tj_field low .status.restarts)"
  wait_for 180 "low Succeeded" phase_is low Succeeded
  grep -h "resumed from /ckpt/step-$stopped" $(logs_of low-0) >/dev/null \
    || fail "low did not resume from step-$stopped: $(grep -h 'resumed from' $(logs_of low-0))"
  wait_for 30 "low's Workload Finished" workload_cond_is low Finished True
  kubectl describe tj low -n "$NS" | sed -n '/^Events:/,$p'
  match_weft_run low 2 $STEPS '' "preempted by a higher-priority job and resumed"
  log "PASS: low preempted at step $stopped by high, checkpointed, requeued, resumed from step-$stopped after high finished; losses of an uninterrupted run"
  ;;

pods-ready)
  queues 8 8Gi
  mapfile -t nodes < <(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
  [ "${#nodes[@]}" -ge 2 ] || fail "needs 2 nodes, found ${#nodes[@]}"
  # Pods of 1200m: one per node (each offers the machine's 2 CPUs); with one
  # node cordoned, one pod of the two can run.
  kubectl cordon "${nodes[1]}" >/dev/null || fail "cordon"
  CORDONED=${nodes[1]}
  job gang 30 1200m
  wait_for 60 "gang admitted" admitted_is gang True
  running_pods() { kubectl get pods -n "$NS" -l weft.dev/job=gang --field-selector status.phase=Running -o name | grep -c .; }
  wait_for 60 "one pod of the gang running" eval '[ "$(running_pods)" = 1 ]'
  log "one of 2 pods runs: $(kubectl get pods -n "$NS" -o wide --no-headers | awk '{print $1, $3, $7}' | paste -sd' ')"
  wait_for 90 "Kueue evicts the gang" eval '[ "$(admitted gang reason)" = Evicted ]'
  log "gang: $(admitted gang message)"
  [[ "$(admitted gang message)" == *PodsReadyTimeout* ]] || fail "not a PodsReady timeout: $(admitted gang message)"
  wait_for 60 "no pod of the gang left" no_pods_of gang
  wait_for 30 "gang requeued" eval '[ "$(workload_of gang .status.requeueState.count)" -ge 1 ] 2>/dev/null'
  log "no pod left half-running; Workload requeued (count $(workload_of gang .status.requeueState.count))"
  kubectl uncordon "${nodes[1]}" >/dev/null
  CORDONED=""
  wait_for 120 "gang admitted again" admitted_is gang True
  wait_for 180 "gang Succeeded" phase_is gang Succeeded
  wait_for 30 "gang's Workload Finished" workload_cond_is gang Finished True
  log "PASS: a gang that could not run whole was evicted (PodsReadyTimeout), emptied, requeued and succeeded once it fit"
  ;;
*) fail "unknown mode $MODE" ;;
esac
finish 0
