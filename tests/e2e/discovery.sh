#!/bin/bash
# The dashboards fed by real Kubernetes discovery, as a plain Prometheus user
# runs them: VictoriaMetrics (Debian's victoria-metrics) scrapes with the
# chart's rendered scrape jobs (localcluster/metrics.sh in its pod mode,
# -promscrape.config.strictParse), both through kubernetes_sd_configs as a
# ServiceAccount that may only read pods, in this namespace and in
# weft-system: the workers' job, and the operator's job (honor_labels) finding
# weft-operator running as the chart's own Deployment. For that, the cluster's
# operator process is stopped and the chart, rendered with helm
# (testdata/operator-pod-values.yaml), runs the operator as a pod that
# weft-node starts from build/bin, with the in-cluster config of its
# ServiceAccount's token; at the end (also on failure) the Deployment is
# deleted and the cluster's operator process started again, so the other e2e
# tests keep theirs. The operator's target is its pod (name, uid, pod IP,
# port metrics) and it is up. A TrainingJob of 2 pods x 2 ranks with the
# tuner on (testdata/discovery.yaml) gives exactly one target per rank,
# labelled namespace, trainingjob, pod and node (the rendezvous port and a
# decoy pod with a port named metrics are dropped); a rank killed with kill -9
# causes a gang restart that the restarts panel shows (cause Failure); the
# tuner's series come through the operator pod's target with this job's
# namespace and trainingjob; every query, variable and annotation of both
# dashboards returns data for the job through range queries, as Grafana runs
# them; the job's last step reaches the scrape (the ranks linger one scrape
# interval); once the job Succeeded its targets are gone.
# Usage: discovery.sh CLUSTER_DIR SOURCE_DIR BUILD_DIR
. "$(dirname "$0")/lib.sh" "$1" "$2" discovery
BUILD=${3:?usage: discovery.sh CLUSTER_DIR SOURCE_DIR BUILD_DIR}
command -v victoria-metrics >/dev/null || { echo "SKIP: victoria-metrics not installed (scripts/install-deps.sh test)"; finish 77; }
HELM=$("$SRC/tests/kube/get-helm.sh"); rc=$?
[ $rc = 77 ] && { echo "SKIP: no helm (tests/kube/get-helm.sh)"; finish 77; }
[ $rc = 0 ] || fail "tests/kube/get-helm.sh failed ($rc)"
STEPS=400
INTERVAL=2
OPNS=weft-system  # the release namespace metrics.sh renders the scrape jobs for (release weft)
OPSEL=app.kubernetes.io/name=weft-operator,app.kubernetes.io/instance=weft
cluster() { "$SRC/localcluster/cluster.sh" "$1" "$CLUSTER" "$BUILD" >/dev/null; }
op_pods() { kubectl get pods -n "$OPNS" -l "$OPSEL" -o name 2>/dev/null; }
no_op_pods() { [ -z "$(op_pods)" ]; }
process_operator_runs() { kill -0 "$(cat "$CLUSTER/weft-operator.pid" 2>/dev/null)" 2>/dev/null; }
# The operator pod's newest log (weft-node keeps it after the pod is gone;
# on real nodes, the leader pod's, through the kubelet).
if [ "$RUNTIME" = containerd ]; then
  op_log() { kubectl logs -n "$OPNS" "${OPPOD:-}" > "$CLUSTER/$NS-operator.log" 2>&1; echo "$CLUSTER/$NS-operator.log"; }
  process_operator_runs() { return 1; }
else
  op_log() { ls -t "$STATE"/logs/"$OPNS"_weft-operator-*/operator/*.log 2>/dev/null | head -1; }
fi
eval "lib_$(declare -f dump)"
dump() { lib_dump; echo "---- the weft-operator pod's log (last lines)"; tail -15 "$(op_log)" 2>/dev/null; }
# Back to the cluster's own operator: the Deployment deleted, its pod gone
# (weft-node deletes it once its process exited), then the process started.
# Run at the end and on every exit; a failure to restore fails the test.
restore() {
  "$SRC/localcluster/metrics.sh" down "$CLUSTER" "$NS" >/dev/null 2>&1
  [ "$RUNTIME" = containerd ] && return 0   # the operator's pods are the cluster's own
  kubectl delete deployment weft-operator -n "$OPNS" --ignore-not-found --wait=false >/dev/null 2>&1
  wait_for_quiet 120 no_op_pods || echo "WARNING [$TEST]: the operator's pod is still there: $(op_pods)" >&2
  process_operator_runs && return 0
  cluster operator-start || { echo "FAIL [$TEST]: cannot start the cluster's weft-operator again" >&2; exit 1; }
}
trap restore EXIT

op_ready() {
  [ "$(kubectl get pods -n "$OPNS" -l "$OPSEL" \
        -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{end}' 2>/dev/null)" = True ]
}
server=$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.server}')
if [ "$RUNTIME" = containerd ]; then
  # Real nodes: the operator already runs as the chart's Deployment (helm
  # install, two replicas); the leader (the Lease's holder) is the one whose
  # tuner series the dashboards show.
  OPPOD=$(kubectl get lease weft-operator -n "$OPNS" -o jsonpath='{.spec.holderIdentity}')
  [ -n "$OPPOD" ] || fail "no leader in Lease $OPNS/weft-operator"
  OPCOUNT=$(op_pods | grep -c .)
  CONNECT="https://10.0.0.1:443"   # kubernetes.default, through kube-proxy
else
  OPCOUNT=1
  CONNECT="https://127.0.0.1:${server##*:}"
# weft-operator as the chart's Deployment.
no_op_pods || fail "an operator pod already runs in $OPNS: $(op_pods)"
cluster operator-kill || fail "cannot stop the cluster's weft-operator"
server=$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.server}')
sed "s#__APISERVER_PORT__#${server##*:}#" "$SRC/tests/e2e/testdata/operator-pod-values.yaml" > "$CLUSTER/operator-pod-values.yaml"
"$HELM" template weft "$SRC/charts/weft" --namespace "$OPNS" --kube-version "$WEFT_KUBE_VERSION" -f "$CLUSTER/operator-pod-values.yaml" \
  > "$CLUSTER/operator-pod.yaml" 2>&1 || fail "helm template: $(cat "$CLUSTER/operator-pod.yaml")"
# The Deployment only: the ServiceAccount and RBAC are the cluster's
# (manifests/rbac, the same chart rendered for release weft).
python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"]
assert len(docs) == 1, docs
print(yaml.safe_dump(docs[0]))' "$CLUSTER/operator-pod.yaml" | kubectl apply -f - >/dev/null \
  || fail "kubectl apply of the chart's Deployment"
wait_for 120 "the operator's pod Ready (its /readyz)" op_ready
OPPOD=$(kubectl get pods -n "$OPNS" -l "$OPSEL" -o jsonpath='{.items[0].metadata.name}')
fi
OPUID=$(kubectl get pod "$OPPOD" -n "$OPNS" -o jsonpath='{.metadata.uid}')
OPIP=$(kubectl get pod "$OPPOD" -n "$OPNS" -o jsonpath='{.status.podIP}')
OPPORT=$(kubectl get pod "$OPPOD" -n "$OPNS" -o jsonpath='{.spec.containers[0].ports[?(@.name=="metrics")].containerPort}')
[ -n "$OPIP" ] && [ -n "$OPPORT" ] || fail "the operator's pod $OPPOD has no IP ('$OPIP') or metrics port ('$OPPORT')"
grep -q "connecting to $CONNECT" "$(op_log)" 2>/dev/null \
  || fail "the operator's pod does not use its in-cluster config: $(head -3 "$(op_log)" 2>/dev/null)"
process_operator_runs && fail "the cluster's operator process runs beside the pod"
log "weft-operator runs as pod $OPPOD ($OPIP, metrics port $OPPORT), the cluster's process stopped"

WEFT_METRICS_OPERATOR=pod WEFT_SCRAPE_INTERVAL=${INTERVAL}s "$SRC/localcluster/metrics.sh" up "$CLUSTER" "$NS" >/dev/null \
  || fail "metrics.sh up"
# shellcheck source=/dev/null
. "$CLUSTER/metrics-$NS/env"
log "victoria-metrics at $VM_URL, scraping every ${INTERVAL}s with $(grep -c job_name "$CLUSTER/metrics-$NS/scrape.yaml") jobs"
grep -q static_configs "$CLUSTER/metrics-$NS/scrape.yaml" && fail "a static target in the scrape jobs"
# The scraper's rights (its token alone, no client certificate): pods in this
# namespace and the operator's, nothing else.
as_scraper() {
  KUBECONFIG=/dev/null kubectl --server="$server" \
    --certificate-authority="$CLUSTER/metrics-$NS/ca.crt" --token="$(cat "$CLUSTER/metrics-$NS/token")" "$@" 2>/dev/null
}
[ "$(as_scraper auth can-i watch pods -n "$NS")" = yes ] || fail "the scraper cannot watch pods"
[ "$(as_scraper auth can-i watch pods -n "$OPNS")" = yes ] || fail "the scraper cannot watch the operator's pods"
[ "$(as_scraper auth can-i list pods -n default)" = no ] || fail "the scraper may list pods elsewhere"
[ "$(as_scraper auth can-i get secrets -n "$NS")" = no ] || fail "the scraper may read secrets"
[ "$(as_scraper auth can-i get secrets -n "$OPNS")" = no ] || fail "the scraper may read the operator's secrets"

instant() {  # instant QUERY: the first sample's value, empty when none
  curl -s --max-time 10 "$VM_URL/api/v1/query" --data-urlencode "query=$1" \
    | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null
}
value_is() { [ "$(instant "$1")" = "$2" ]; }
# The scraper's active targets of this namespace: "job pod instance" lines.
# (A line "unanswered" when the API did not answer: no list is no answer.)
targets() {
  curl -s --max-time 10 "$VM_URL/api/v1/targets" | python3 -c '
import json, sys
try:
    active = json.load(sys.stdin)["data"]["activeTargets"]
except Exception:
    print("unanswered")
    sys.exit(0)
for t in active:
    l = t["labels"]
    if l.get("namespace") == sys.argv[1]:
        print(l.get("job"), l.get("pod"), l.get("instance"), l.get("trainingjob"), t["health"])' "$NS" 2>/dev/null
}
n_targets_up() { [ "$(targets | grep -c ' up$')" = "$1" ]; }
no_target_left() { [ -z "$(targets)" ]; }
# The weft-operator job's active targets: "namespace pod instance pod-uid health".
op_targets() {
  curl -s --max-time 10 "$VM_URL/api/v1/targets" | python3 -c '
import json, sys
for t in json.load(sys.stdin)["data"]["activeTargets"]:
    l, d = t["labels"], t.get("discoveredLabels", {})
    if l.get("job") == "weft-operator":
        print(l.get("namespace"), l.get("pod"), l.get("instance"), d.get("__meta_kubernetes_pod_uid", "-"), t["health"])' 2>/dev/null
}
op_target_up() { op_targets | grep -qx "$OPNS $OPPOD $OPIP:$OPPORT $OPUID up"; }
wait_for 60 "the operator's pod discovered and scraped" op_target_up
log "operator target: $(op_targets)"
op_sel="job=\"weft-operator\",namespace=\"$OPNS\",pod=\"$OPPOD\""
wait_for 30 "the operator pod's weft_operator_leader" value_is "weft_operator_leader{$op_sel}" 1

T_START=$(date +%s)
apply_testdata discovery.yaml "s#__STEPS__#$STEPS#"
decoy_runs() { [ "$(kubectl get pod decoy -n "$NS" -o jsonpath='{.status.phase}' 2>/dev/null)" = Running ]; }
wait_for 60 "the decoy pod Running" decoy_runs
wait_for 120 "phase Running" phase_is disc Running
wait_for 120 "4 targets up" n_targets_up 4
log "targets: $(targets | sort | paste -sd'|')"
targets | grep -q decoy && fail "the decoy pod was scraped"
dropped=$(curl -s --max-time 10 "$VM_URL/api/v1/targets" | python3 -c '
import json, sys
print(" ".join(sorted(t["discoveredLabels"].get("__meta_kubernetes_pod_container_port_name", "-") + "@" + t["discoveredLabels"].get("__meta_kubernetes_pod_name", "-")
    for t in json.load(sys.stdin)["data"]["droppedTargets"])))')
grep -q "metrics@decoy" <<<"$dropped" || fail "the decoy pod was not discovered and dropped: $dropped"
grep -q "rendezvous@disc-0" <<<"$dropped" || fail "the rendezvous port was not discovered and dropped: $dropped"
log "discovered and dropped: $dropped"
targets | awk '$1 != "weft-workers" || $4 != "disc" {bad = 1} END {exit bad}' || fail "targets without job weft-workers, trainingjob disc: $(targets)"
# One series per rank, each with the labels the dashboards select on.
q="weft_step{job=\"weft-workers\",namespace=\"$NS\",trainingjob=\"disc\"}"
wait_for 60 "4 ranks' weft_step" value_is "count(count by (rank, pod, node) ($q))" 4
value_is "count(count by (rank) ($q))" 4 || fail "ranks: $(instant "count(count by (rank) ($q))")"
value_is "count(count by (pod) ($q))" 2 || fail "pods: $(instant "count(count by (pod) ($q))")"
value_is "count(up{job=\"weft-operator\"} == 1)" "$OPCOUNT" || fail "the operator's $OPCOUNT targets are not up: $(op_targets)"

# A gang restart: kill -9 of one rank inside pod disc-1.
wait_for 180 "a checkpoint" ckpt_at_least 20
wait_for 120 "the tuner's first trial" tj_field_set disc '.status.tuning.trials[0].bucketMB'
leader=$(worker_pid disc-1) || fail "no process of pod disc-1"
rank=$(pgrep -P "$leader" | head -1)  # the pod's process is its weft-run; the ranks are its children
[ -n "$rank" ] || fail "no rank under pod disc-1's weft-run ($leader)"
T_KILL=$(date +%s)
kill -9 "$rank" || fail "kill -9 $rank"
log "killed rank process $rank of pod disc-1 at checkpoint step $(latest_step)"
wait_for 120 "a gang restart" tj_field_is disc .status.restarts 1
[ "$(tj_field disc .status.lastRestartCause)" = Failure ] || fail "lastRestartCause $(tj_field disc .status.lastRestartCause)"
wait_for 120 "phase Running again" phase_is disc Running
wait_for 120 "4 targets of the new attempt up" n_targets_up 4
wait_for 120 "the new attempt's steps scraped" value_is "count(count by (rank) (count_over_time(${q}[4s]) > 0))" 4

# The tuner's first trial scraped: the trial panel has nothing to show
# before a trial completed (on a loaded host the first one ends after the new
# attempt's first scrapes). The queries' window ends at each retry's time
# (the held-out loss comes every 20 steps: the first of the new attempt may
# come after the queries start).
# Asked as the panel asks it (a range query from the test's start): an
# instant query saw the series a while before range queries returned it.
trial_scraped() {
  curl -s --max-time 10 "$VM_URL/api/v1/query_range" --data-urlencode \
    "query=weft_operator_tuner_trial_step_seconds{namespace=\"$NS\",trainingjob=\"disc\",job=\"weft-operator\",pod=\"$OPPOD\"}" \
    --data-urlencode "start=$T_START" --data-urlencode "end=$(date +%s)" --data-urlencode "step=$INTERVAL" \
    | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["data"]["result"] else 1)' 2>/dev/null
}
wait_for 180 "the tuner's first trial scraped" trial_scraped
# Every query of both dashboards, for this job, while it runs.
out=$(python3 "$SRC/tests/e2e/dashboard_queries.py" "$VM_URL" "$T_START" "$(date +%s)" \
  "$SRC/charts/weft/dashboards/weft-sync-overlap.json" "$SRC/charts/weft/dashboards/weft-operator.json" \
  --var namespace="$NS" --var trainingjob=disc --var rank='.*' --scrape-interval $INTERVAL --deadline 120 \
  --positive 'weft_operator_gang_restarts_total:cause=Failure' --positive-after "$T_KILL" 2>&1) || fail "dashboard queries without data:
$out"
log "$(echo "$out" | paste -sd';')"

# The end: the last step scraped (the ranks outlive it by a scrape interval),
# then no target left. A finished rank's target is down first (its metrics
# server stops as the process exits) and dropped when discovery sees its pod
# Succeeded, a moment later (the relabelling keeps Running pods only).
wait_for 600 "phase Succeeded" phase_is disc Succeeded
# Every rank's: without the linger, ranks ended 1 to 5 steps short of it.
last=$(instant "min(max by (rank) (max_over_time(${q}[10m])))")
[ "$last" = "$STEPS" ] || fail "a rank's last scraped step is '$last', not $STEPS: $(instant "max by (rank) (max_over_time(${q}[10m]))")"
wait_for 60 "no target up" n_targets_up 0
wait_for_quiet 30 no_target_left || fail "targets left after the job: $(targets)"
# The cluster's operator back for the tests after this one.
restore
[ "$RUNTIME" = containerd ] || process_operator_runs || fail "the cluster's operator process did not start again"
log "PASS: 4 rank targets and the operator's pod by pod discovery, a restart on the restarts panel, every dashboard query with data, step $last scraped on every rank, targets gone; the cluster's operator restored"
finish 0
