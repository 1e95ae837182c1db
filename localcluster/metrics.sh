#!/bin/bash
# VictoriaMetrics (Debian's victoria-metrics, a Prometheus-compatible scraper
# and query API) scraping a local cluster with the chart's own scrape jobs,
# as a plain Prometheus would run them:
#  - weft-workers: the chart's metrics.workers.scrapeConfig job unchanged but
#    for how it reaches the API server (api_server, tls_config.ca_file,
#    bearer_token_file): real pod discovery (kubernetes_sd_configs) as the
#    ServiceAccount weft-metrics, which may only get, list and watch pods
#    (a Role in WATCH_NAMESPACE when given, else a ClusterRole);
#  - weft-operator: the chart's metrics.scrapeConfig job, relabelling and
#    honor_labels unchanged. Where the operator runs depends on the mode
#    (WEFT_METRICS_OPERATOR):
#      process (default): cluster.sh runs the operator as a process, not a
#        pod, so the target is static (DIR/operator.metrics; no operator job
#        when that file is absent) and carries the meta labels pod discovery
#        would give the chart's Deployment pod; the job's own rules keep and
#        label it. This is `WEFT_CLUSTER_METRICS=1 cluster.sh up`.
#      pod: the operator runs as the chart's Deployment (release weft in
#        weft-system, as tests/e2e/discovery.sh deploys it): the job is
#        changed only as the workers' is, and finds the pod by real pod
#        discovery in weft-system, where the scraper may also get, list and
#        watch pods (a Role there when WATCH_NAMESPACE is given).
# Everything listens on loopback. Queries: http://127.0.0.1:PORT (a Grafana
# Prometheus data source, or /api/v1/query_range).
#
# Usage: localcluster/metrics.sh up|down DIR [WATCH_NAMESPACE]
#   DIR is the cluster's (cluster.sh): DIR/kubeconfig (admin), DIR/operator.metrics
#   (the operator's metrics address). State under DIR/metrics[-NAMESPACE]:
#   env (VM_URL=...), scrape.yaml, vm.log; `down` stops it and removes them
#   (and the Role it made in weft-system).
# Env: WEFT_SCRAPE_INTERVAL (default the chart's, 15s), WEFT_VM_PORT (default: a free one),
#      WEFT_METRICS_OPERATOR (process or pod, see above).
set -euo pipefail
CMD=${1:?usage: metrics.sh up|down DIR [WATCH_NAMESPACE]}
DIR=$(cd "${2:?DIR}" && pwd)
WATCH=${3:-}
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/.." && pwd)
STATE=$DIR/metrics${WATCH:+-$WATCH}
export KUBECONFIG=$DIR/kubeconfig
# shellcheck source=kube-bin.sh
. "$HERE/kube-bin.sh"   # kubectl of the control plane's release first on PATH

stop_vm() {
  local f=$STATE/vm.pid pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# The operator's release namespace (the chart's scrape jobs are rendered for
# release weft there, like manifests/install.yaml).
OPERATOR_NS=weft-system
# The Role `up` made in OPERATOR_NS for a namespaced scraper (pod mode).
drop_operator_role() {
  [ -n "$WATCH" ] && [ -f "$STATE/operator-role" ] || return 0
  kubectl delete role,rolebinding "weft-metrics-$WATCH" -n "$OPERATOR_NS" --ignore-not-found \
    --request-timeout=10s >/dev/null 2>&1 || true
}

case "$CMD" in
up)
  VM=$(command -v victoria-metrics || true)
  [ -n "$VM" ] || { echo "metrics: victoria-metrics not installed (scripts/install-deps.sh test)" >&2; exit 1; }
  MODE=${WEFT_METRICS_OPERATOR:-process}
  case "$MODE" in
    process|pod) ;;
    *) echo "metrics: WEFT_METRICS_OPERATOR must be process or pod, not '$MODE'" >&2; exit 2 ;;
  esac
  stop_vm
  drop_operator_role
  rm -rf "$STATE"; mkdir -p "$STATE"
  # The scraper's identity: a ServiceAccount whose token the token controller
  # signs, allowed nothing but reading pods.
  sa_ns=${WATCH:-$OPERATOR_NS}
  kubectl create serviceaccount weft-metrics -n "$sa_ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  if [ -n "$WATCH" ]; then
    kubectl create role weft-metrics -n "$WATCH" --verb=get,list,watch --resource=pods --dry-run=client -o yaml \
      | kubectl apply -f - >/dev/null
    kubectl create rolebinding weft-metrics -n "$WATCH" --role=weft-metrics --serviceaccount="$sa_ns:weft-metrics" \
      --dry-run=client -o yaml | kubectl apply -f - >/dev/null
    if [ "$MODE" = pod ]; then
      # The operator's pod is found by discovery in its own namespace.
      touch "$STATE/operator-role"
      kubectl create role "weft-metrics-$WATCH" -n "$OPERATOR_NS" --verb=get,list,watch --resource=pods \
        --dry-run=client -o yaml | kubectl apply -f - >/dev/null
      kubectl create rolebinding "weft-metrics-$WATCH" -n "$OPERATOR_NS" --role="weft-metrics-$WATCH" \
        --serviceaccount="$sa_ns:weft-metrics" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
    fi
  else
    kubectl create clusterrole weft-metrics --verb=get,list,watch --resource=pods --dry-run=client -o yaml \
      | kubectl apply -f - >/dev/null
    kubectl create clusterrolebinding weft-metrics --clusterrole=weft-metrics --serviceaccount="$sa_ns:weft-metrics" \
      --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  fi
  # A token from the TokenRequest API, valid for a day (no token Secret is
  # made for a ServiceAccount since 1.24).
  token=""
  for _ in $(seq 1 100); do
    token=$(kubectl create token weft-metrics -n "$sa_ns" --duration=24h 2>/dev/null || true)
    [ -n "$token" ] && break
    sleep 0.1
  done
  [ -n "$token" ] || { echo "metrics: no token for ServiceAccount $sa_ns/weft-metrics" >&2; exit 1; }
  printf '%s' "$token" > "$STATE/token"; chmod 600 "$STATE/token"
  kubectl config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d > "$STATE/ca.crt"
  server=$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.server}')
  operator=$(cat "$DIR/operator.metrics" 2>/dev/null || true)

  # The chart's two scrape jobs, rendered as a user renders them.
  HELM=$("$SRC/tests/kube/get-helm.sh")
  interval=${WEFT_SCRAPE_INTERVAL:-15s}
  "$HELM" template weft "$SRC/charts/weft" --namespace "$OPERATOR_NS" --kube-version "$WEFT_KUBE_VERSION" \
    --set metrics.scrapeConfig.enabled=true --set metrics.scrapeConfig.interval="$interval" \
    --set metrics.workers.scrapeConfig.enabled=true --set metrics.workers.scrapeConfig.interval="$interval" \
    ${WATCH:+--set operator.watchNamespace="$WATCH"} > "$STATE/chart.yaml"
  /usr/bin/python3 - "$STATE" "$server" "$MODE" "$operator" <<'PY'
import sys, yaml
state, server, mode, operator = sys.argv[1:]
docs = [d for d in yaml.safe_load_all(open(f"{state}/chart.yaml")) if d]
maps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
workers = yaml.safe_load(maps["weft-worker-scrape"]["weft-workers.yaml"])
op = yaml.safe_load(maps["weft-operator-scrape"]["weft-operator.yaml"])
def from_here(job):  # how the scraper reaches the API server, nothing else
    for sd in job["kubernetes_sd_configs"]:
        sd["api_server"] = server
        sd["tls_config"] = {"ca_file": f"{state}/ca.crt"}
        sd["bearer_token_file"] = f"{state}/token"
from_here(workers[0])
jobs = workers
if mode == "pod":
    from_here(op[0])
    jobs = workers + op
elif operator:
    # What pod discovery would say of the chart's operator pod (release weft).
    del op[0]["kubernetes_sd_configs"]
    op[0]["static_configs"] = [{"targets": [operator], "labels": {
        "__meta_kubernetes_namespace": "weft-system",
        "__meta_kubernetes_pod_name": "weft-operator",
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": "weft-operator",
        "__meta_kubernetes_pod_label_app_kubernetes_io_instance": "weft",
        "__meta_kubernetes_pod_container_port_name": "metrics",
        "__meta_kubernetes_pod_phase": "Running"}}]
    jobs = workers + op
yaml.safe_dump({"scrape_configs": jobs}, open(f"{state}/scrape.yaml", "w"), sort_keys=False)
PY
  port=${WEFT_VM_PORT:-$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
  # -search.latencyOffset: answer up to now (a dashboard of a running job);
  # -promscrape.kubernetesSDCheckInterval: pick up new and gone pods at once.
  setsid "$VM" -httpListenAddr="127.0.0.1:$port" -storageDataPath="$STATE/data" -retentionPeriod=1d \
    -promscrape.config="$STATE/scrape.yaml" -promscrape.config.strictParse \
    -promscrape.kubernetesSDCheckInterval=1s -search.latencyOffset=1s -loggerLevel=WARN \
    </dev/null >"$STATE/vm.log" 2>&1 &
  echo $! > "$STATE/vm.pid"
  ok=0
  for _ in $(seq 1 200); do
    curl -sf --max-time 2 "http://127.0.0.1:$port/health" >/dev/null 2>&1 && { ok=1; break; }
    kill -0 "$(cat "$STATE/vm.pid")" 2>/dev/null || break
    sleep 0.1
  done
  [ $ok = 1 ] || { echo "metrics: victoria-metrics did not start; see $STATE/vm.log" >&2; tail -5 "$STATE/vm.log" >&2; exit 1; }
  echo "VM_URL=http://127.0.0.1:$port" > "$STATE/env"
  echo "metrics: victoria-metrics at http://127.0.0.1:$port (a Grafana Prometheus data source), scrape jobs in $STATE/scrape.yaml"
  ;;
down)
  stop_vm
  drop_operator_role
  rm -rf "$STATE"
  ;;
*) echo "metrics: unknown command '$CMD'" >&2; exit 2 ;;
esac
