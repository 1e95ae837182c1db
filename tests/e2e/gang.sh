#!/bin/bash
# Gang scheduling by the real scheduler-plugins scheduler (Coscheduling;
# localcluster/coscheduling.sh, which the e2e-pods fixture starts): the
# PodGroup weft writes for `scheduling: {gang: podgroup}` is honoured. With
# one of the two nodes cordoned, only one pod of 1200m fits:
#  1. control: the same job without a gang, placed by the default scheduler,
#     gets one pod bound and running and the other Pending (the half-placed
#     gang gang scheduling exists to prevent);
#  2. with the gang: no pod is bound at all while the gang cannot fit, the
#     job is Pending with condition GangScheduled False; with the node back
#     both pods are bound, GangScheduled is True and the job succeeds.
# Usage: gang.sh CLUSTER_DIR SOURCE_DIR
. "$(dirname "$0")/lib.sh" "$1" "$2" gang
[ -f "$CLUSTER/coscheduling.pid" ] && kill -0 "$(cat "$CLUSTER/coscheduling.pid")" 2>/dev/null \
  || fail "scheduler-plugins' scheduler is not running (WEFT_CLUSTER_COSCHEDULING=1)"
kubectl get crd podgroups.scheduling.x-k8s.io >/dev/null 2>&1 || fail "the PodGroup CRD is not installed"
CORDONED=""
trap '[ -n "$CORDONED" ] && kubectl uncordon "$CORDONED" >/dev/null 2>&1' EXIT
mapfile -t nodes < <(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
[ "${#nodes[@]}" -ge 2 ] || fail "needs 2 nodes, found ${#nodes[@]}"
kubectl cordon "${nodes[1]}" >/dev/null || fail "cordon ${nodes[1]}"
CORDONED=${nodes[1]}

# job NAME SCHEDULING_LINE: tiny-cpu with 2 pods of 1200m (one per node:
# each node offers the machine's 2 CPUs).
job() {
  sed -e "s/^  name: tiny-cpu$/  name: $1/" -e 's/requests: {cpu: "1", memory: 1Gi}/requests: {cpu: 1200m, memory: 512Mi}/' \
      -e 's/train: {steps: 200}/train: {steps: 30}/' -e "s/^spec:$/spec:\n$2/" "$SRC/manifests/examples/tiny-cpu.yaml" \
    | kubectl apply -n "$NS" -f - >/dev/null || fail "applying $1"
  [ "$(tj_field "$1" .spec.resources.requests.cpu)" = 1200m ] || fail "$1: request override not applied"
}
bound() { kubectl get pods -n "$NS" -l "weft.dev/job=$1" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c .; }
running() { kubectl get pods -n "$NS" -l "weft.dev/job=$1" --field-selector status.phase=Running -o name | grep -c .; }

# 1. Without a gang: the default scheduler binds what fits.
job loose "  scheduling: {gang: none}"
wait_for 60 "one pod of loose running" eval '[ "$(running loose)" = 1 ]'
log "control, default scheduler: $(bound loose) of 2 pods bound, $(running loose) running (a half-placed gang)"
kubectl delete tj loose -n "$NS" --wait=true >/dev/null || fail "delete loose"
wait_for 60 "loose's pods gone" eval '[ -z "$(kubectl get pods -n "$NS" -l weft.dev/job=loose -o name)" ]'

# 2. The gang: nothing bound until all of it fits.
job gang "  scheduling: {gang: podgroup}"
wait_for 30 "the PodGroup" eval '[ "$(kubectl get podgroup gang -n "$NS" -o jsonpath={.spec.minMember} 2>/dev/null)" = 2 ]'
[ "$(kubectl get pod gang-0 -n "$NS" -o jsonpath='{.spec.schedulerName}')" = scheduler-plugins-scheduler ] \
  || fail "gang-0 does not go to scheduler-plugins-scheduler"
wait_for 30 "both pods of gang created" eval '[ "$(kubectl get pods -n "$NS" -l weft.dev/job=gang -o name | grep -c .)" = 2 ]'
# The scheduler has seen them: its FailedScheduling events.
wait_for 60 "the scheduler's verdict" eval \
  'kubectl get events -n "$NS" --field-selector reason=FailedScheduling -o jsonpath="{.items[*].source.component}{.items[*].reportingComponent}" | grep -q scheduler-plugins-scheduler'
for _ in $(seq 1 20); do  # 20 s in which no pod may be bound
  [ "$(bound gang)" = 0 ] || fail "a pod of the gang was bound while the gang cannot fit: $(kubectl get pods -n "$NS" -o wide)"
  sleep 1
done
phase_is gang Pending || fail "gang is $(tj_field gang .status.phase), expected Pending"
why=$(tj_field gang '.status.conditions[?(@.type=="GangScheduled")].message')
[ "$(tj_field gang '.status.conditions[?(@.type=="GangScheduled")].status')" = False ] || fail "GangScheduled is not False: $why"
log "gang: no pod bound for 20 s; GangScheduled False: $why"
kubectl get events -n "$NS" --field-selector reason=FailedScheduling -o jsonpath='{.items[-1].message}'; echo
kubectl uncordon "${nodes[1]}" >/dev/null || fail "uncordon"
CORDONED=""
wait_for 120 "both pods bound" eval '[ "$(bound gang)" = 2 ]'
nodes_used=$(kubectl get pods -n "$NS" -l weft.dev/job=gang -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u | paste -sd' ')
wait_for 60 "GangScheduled True" tj_field_is gang '.status.conditions[?(@.type=="GangScheduled")].status' True
wait_for 180 "gang Succeeded" phase_is gang Succeeded
log "PASS: the default scheduler bound 1 of 2 pods; scheduler-plugins bound none while the gang could not fit, then both ($nodes_used); Succeeded"
finish 0
