#!/bin/bash
# A whole local Kubernetes cluster on this machine: the testenv control plane
# (etcd, kube-apiserver, controller-manager, scheduler of the release
# WEFT_KUBE_VERSION selects), the TrainingJob CRD, and nodes of one of two
# kinds (WEFT_CLUSTER_RUNTIME):
#   containerd (the default): real nodes (nodes.sh): kubelets with containerd,
#     runc, CNI, CoreDNS and kube-proxy; pods run the images built from the
#     Dockerfile (OCI archives, WEFT_CLUSTER_IMAGES, default BUILD_DIR/images/
#     weft-operator.tar and weft-worker-cpu.tar, which `make test-images`
#     writes), imported into each node's containerd: nothing is pulled. The
#     operator is installed with helm from charts/weft, as a user installs
#     it, and runs as the chart's Deployment.
#   weft-node: weft-node's simulated nodes (pods run as local processes from
#     BUILD_DIR/bin, see localcluster/node/agent.h) and weft-operator as a
#     process with the chart's ServiceAccount (not admin).
#
# Usage: localcluster/cluster.sh up|down|status|operator-kill|operator-start DIR BUILD_DIR
#   up              starts everything under DIR, waits for Ready nodes, prints the KUBECONFIG
#   down            stops the operator and the nodes (every pod with them), stops the control plane
#   operator-kill   SIGKILLs weft-operator (a crash: no cleanup, no lease release;
#                   with containerd: the leader pod's process, which the kubelet restarts)
#   operator-start  starts weft-operator again with the flags `up` used (weft-node);
#                   waits for the Deployment to be available again (containerd)
# Env: WEFT_CLUSTER_RUNTIME (containerd or weft-node), WEFT_CLUSTER_NODES
#      (default 2 with containerd: each real node offers this machine's CPUs, and
#      the examples' 2 ranks ask for 1 CPU each beside the operator; 1 with
#      weft-node), WEFT_OPERATOR_ARGS (extra weft-operator flags),
#      WEFT_CLUSTER_IMAGES (containerd: the OCI archives to import),
#      WEFT_NODE_CPU (weft-node: per node, default 32), WEFT_NODE_ARGS (extra
#      weft-node flags, e.g. --start-delay for fault tests),
#      WEFT_CLUSTER_BIN_DIR (where the agent finds pod commands; default BUILD_DIR/bin),
#      WEFT_OPERATOR_METRICS_PORT (weft-node: the operator's /metrics on 127.0.0.1: a port,
#      auto for a free one; default off; --metrics-port in WEFT_OPERATOR_ARGS
#      does the same), WEFT_CLUSTER_METRICS=1 (victoria-metrics scraping the
#      ranks and the operator with the chart's scrape jobs: localcluster/metrics.sh,
#      the ranks by pod discovery, the operator's pods too (containerd) or
#      this operator process as a static target (weft-node; its metrics on);
#      its URL is printed), WEFT_CLUSTER_KUEUE=1 (Kueue's manager as a process,
#      localcluster/kueue.sh, started before the operator, which the chart then
#      installs with operator.kueue=true; containerd only; `down` always stops it),
#      WEFT_CLUSTER_COSCHEDULING=1 (scheduler-plugins' kube-scheduler with the
#      Coscheduling plugin as a second scheduler, a process,
#      localcluster/coscheduling.sh: pods with schedulerName
#      scheduler-plugins-scheduler and a PodGroup are bound all or none;
#      started before the operator; containerd only; `down` always stops it).
set -euo pipefail
CMD=${1:?usage: cluster.sh up|down|status|operator-kill|operator-start DIR BUILD_DIR}
DIR=$(mkdir -p "${2:?DIR}" && cd "$2" && pwd)
BUILD=$(cd "${3:?BUILD_DIR}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/.." && pwd)
BIN=$BUILD/bin
# shellcheck source=kube-bin.sh
. "$HERE/kube-bin.sh"   # kubectl of the control plane's release first on PATH
RUNTIME=${WEFT_CLUSTER_RUNTIME:-containerd}
# `down` takes down what `up` started, whichever runtime the environment names now.
if [ "$CMD" != up ]; then
  if [ -f "$DIR/runtime" ]; then RUNTIME=$(cat "$DIR/runtime")
  elif [ -d "$DIR/node" ] || [ -f "$DIR/weft-node.pid" ]; then RUNTIME=weft-node
  fi
fi
case $RUNTIME in
  containerd|weft-node) ;;
  *) echo "cluster: WEFT_CLUSTER_RUNTIME '$RUNTIME' is neither containerd nor weft-node" >&2; exit 2 ;;
esac
OPNS=weft-system

stop_pid() {  # stop_pid NAME: SIGTERM, wait up to 5 s, SIGKILL
  local f="$DIR/$1.pid" pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

start_operator() {  # the flags of `up` are kept in DIR/operator.args
  # --allow-host-path: on this one-machine cluster the examples and the e2e
  # tests share checkpoints between ranks through a hostPath volume. Metrics
  # are off unless the args turn them on; ports on loopback only.
  local args defaults="--health-port 0"
  args=$(cat "$DIR/operator.args")
  case " $args " in *" --metrics-port"*) ;; *) defaults="$defaults --metrics-port 0" ;; esac
  case " $args " in *" --bind-address"*) ;; *) defaults="$defaults --bind-address 127.0.0.1" ;; esac
  # shellcheck disable=SC2086
  setsid "$BIN/weft-operator" --kubeconfig "$DIR/operator.kubeconfig" $defaults \
    --allow-host-path $args </dev/null >>"$DIR/logs/weft-operator.log" 2>&1 &
  echo $! > "$DIR/weft-operator.pid"
}

# Pod IPs 127.<octet>.x.y: the octet comes from DIR, so that two clusters on
# one machine (two checkouts testing at once) do not hand out the same pod
# IPs, whose ranks would then meet the other cluster's rendezvous.
OCTET=${WEFT_POD_IP_OCTET:-$(( $(printf '%s' "$DIR" | cksum | cut -d' ' -f1) % 200 + 20 ))}

# ---- containerd: real nodes, the operator from the chart ----
operator_pods() {
  kubectl get pods -n "$OPNS" -l app.kubernetes.io/name=weft-operator -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' 2>/dev/null
}
containerd_up() {
  local T0 images img helm args extra=() a
  T0=$(date +%s%N)
  "$HERE/build-kube.sh" >/dev/null
  "$HERE/build-node-runtime.sh" >/dev/null
  images=${WEFT_CLUSTER_IMAGES:-$BUILD/images/weft-operator.tar $BUILD/images/weft-worker-cpu.tar}
  for img in $images; do
    [ -f "$img" ] || { echo "cluster: image archive $img missing: 'make test-images' builds the images from the Dockerfile and writes it" >&2; exit 1; }
  done
  helm=$("$SRC/tests/kube/get-helm.sh") || { echo "cluster: no helm (tests/kube/get-helm.sh)" >&2; exit 1; }
  "$0" down "$DIR" "$BUILD" >/dev/null 2>&1 || true
  echo containerd > "$DIR/runtime"
  mkdir -p "$DIR/logs"
  export WEFT_CLUSTER_NODES=${WEFT_CLUSTER_NODES:-2}
  "$HERE/nodes.sh" net-up "$DIR"
  # The CRDs before the controllers: the garbage collector then deletes a
  # TrainingJob's pods with it from the first second.
  WEFT_KUBE_ADDRESS=$("$HERE/nodes.sh" address "$DIR") WEFT_KUBE_CRDS="$SRC/manifests/crd/" \
    "$HERE/testenv.sh" start "$DIR" >/dev/null
  export KUBECONFIG=$DIR/kubeconfig
  WEFT_CLUSTER_IMAGES=$images "$HERE/nodes.sh" up "$DIR"
  # The operator as users install it. hostPath volumes allowed: on this
  # one-machine cluster the examples and the e2e tests share checkpoints
  # between ranks through one. WEFT_OPERATOR_ARGS become operator.extraArgs.
  args=(--set operator.allowHostPath=true)
  # Kueue before the operator: its CRDs (Workload) exist when the operator starts.
  if [ "${WEFT_CLUSTER_KUEUE:-0}" = 1 ]; then
    "$HERE/kueue.sh" up "$DIR"
    args+=(--set operator.kueue=true)
  fi
  # Gang scheduling (PodGroups) by scheduler-plugins' scheduler, its CRD
  # installed before the operator starts.
  if [ "${WEFT_CLUSTER_COSCHEDULING:-0}" = 1 ]; then
    "$HERE/coscheduling.sh" up "$DIR"
  fi
  # shellcheck disable=SC2086
  for a in ${WEFT_OPERATOR_ARGS:-}; do extra+=("$a"); done
  if [ ${#extra[@]} -gt 0 ]; then
    args+=(--set-json "operator.extraArgs=$(printf '%s\n' "${extra[@]}" | /usr/bin/python3 -c 'import json, sys; print(json.dumps(sys.stdin.read().split()))')")
  fi
  "$helm" install weft "$SRC/charts/weft" --namespace "$OPNS" --create-namespace "${args[@]}" \
    >"$DIR/logs/helm-install.log" 2>&1 || { cat "$DIR/logs/helm-install.log" >&2; exit 1; }
  kubectl rollout status deployment/weft-operator -n "$OPNS" --timeout=180s >/dev/null 2>"$DIR/logs/rollout.log" \
    || { cat "$DIR/logs/rollout.log" >&2; kubectl get pods -n "$OPNS" -o wide >&2; echo "cluster: the operator's Deployment did not become available" >&2; exit 1; }
  # victoria-metrics on loopback scraping the ranks and the operator's pods,
  # both found by pod discovery (metrics.sh, pod mode).
  [ "${WEFT_CLUSTER_METRICS:-0}" = 1 ] && WEFT_METRICS_OPERATOR=pod "$HERE/metrics.sh" up "$DIR"
  echo "cluster: up in $(( ($(date +%s%N) - T0) / 1000000 )) ms: $WEFT_CLUSTER_NODES nodes, weft-operator $(operator_pods | wc -l) pods (helm release weft in $OPNS); logs in $DIR/logs and $DIR/nodes/*/logs"
  echo "export KUBECONFIG=$DIR/kubeconfig"
}
containerd_down() {
  local m
  "$HERE/coscheduling.sh" down "$DIR"
  "$HERE/kueue.sh" down "$DIR"
  for m in "$DIR"/metrics*/; do [ -d "$m" ] && "$HERE/metrics.sh" down "$DIR" "$(basename "$m" | sed -n 's/^metrics-//p')"; done
  "$HERE/nodes.sh" down "$DIR"
  "$HERE/testenv.sh" stop "$DIR"
  rm -f "$DIR/runtime"
  echo "cluster: down"
}
# The leader's container process, killed as a crash would: the kubelet
# restarts the container, the Lease expires and a replica takes over.
containerd_operator_kill() {
  local holder pod uid pid
  export KUBECONFIG=$DIR/kubeconfig
  holder=$(kubectl get lease -n "$OPNS" -o jsonpath='{.items[0].spec.holderIdentity}' 2>/dev/null)
  pod=${holder%%_*}
  [ -n "$pod" ] || pod=$(operator_pods | head -1)
  [ -n "$pod" ] || { echo "cluster: no weft-operator pod" >&2; exit 1; }
  pid=$("$HERE/nodes.sh" pid "$DIR" "$OPNS" "$pod" operator) || { echo "cluster: no process of pod $pod" >&2; exit 1; }
  kill -9 "$pid"
  echo "cluster: weft-operator pod $pod (pid $pid) killed"
}

case "$CMD" in
up)
  [ "$RUNTIME" = containerd ] && { containerd_up; exit 0; }
  echo weft-node > "$DIR/runtime"
  T0=$(date +%s%N)
  for b in weft-node weft-operator weft-worker; do
    [ -x "$BIN/$b" ] || { echo "cluster: $BIN/$b missing; build it first (make cluster-up does)" >&2; exit 1; }
  done
  "$HERE/build-kube.sh" >/dev/null
  "$0" down "$DIR" "$BUILD" >/dev/null 2>&1 || true
  # The CRDs before the controllers: the garbage collector then deletes a
  # TrainingJob's pods with it from the first second.
  WEFT_KUBE_CRDS="$SRC/manifests/crd/" "$HERE/testenv.sh" start "$DIR" >/dev/null
  export KUBECONFIG=$DIR/kubeconfig
  kubectl apply -f "$SRC/manifests/namespace.yaml" -f "$SRC/manifests/rbac/" >/dev/null
  # The operator authenticates as its ServiceAccount (a static token the
  # testenv API server maps to system:serviceaccount:weft-system:weft-operator).
  server=$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  cat > "$DIR/operator.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: weft-local
  cluster: {server: "$server", certificate-authority-data: "$ca"}
users:
- name: weft-operator
  user: {token: weft-operator-token}
contexts:
- name: weft-operator
  context: {cluster: weft-local, user: weft-operator, namespace: weft-system}
current-context: weft-operator
KC
  mkdir -p "$DIR/logs"
  setsid "$BIN/weft-node" --kubeconfig "$DIR/kubeconfig" --state-dir "$DIR/node" \
    --nodes "${WEFT_CLUSTER_NODES:-1}" --cpu "${WEFT_NODE_CPU:-32}" --bin-dir "${WEFT_CLUSTER_BIN_DIR:-$BIN}" ${WEFT_NODE_ARGS:-} \
    --pod-ip-octet "$OCTET" --kubelet-version "v$WEFT_KUBE_VERSION" \
    </dev/null >>"$DIR/logs/weft-node.log" 2>&1 &
  echo $! > "$DIR/weft-node.pid"
  kubectl wait --for condition=established --timeout=60s crd/trainingjobs.weft.dev >/dev/null
  args=${WEFT_OPERATOR_ARGS:-}
  mport=${WEFT_OPERATOR_METRICS_PORT:-}
  [ "${WEFT_CLUSTER_METRICS:-0}" = 1 ] && [ -z "$mport" ] && mport=auto
  [ "$mport" = auto ] && mport=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  if [ -n "$mport" ] && [ "$mport" != 0 ]; then args="--metrics-port $mport $args"; fi
  mport=$(sed -n 's/.*--metrics-port[= ]\([0-9][0-9]*\).*/\1/p' <<<"$args")
  rm -f "$DIR/operator.metrics"
  if [ -n "$mport" ] && [ "$mport" != 0 ]; then echo "127.0.0.1:$mport" > "$DIR/operator.metrics"; fi
  echo "$args" > "$DIR/operator.args"
  [ "${WEFT_CLUSTER_KUEUE:-0}" = 1 ] && { echo "cluster: WEFT_CLUSTER_KUEUE needs real nodes (WEFT_CLUSTER_RUNTIME=containerd)" >&2; exit 2; }
  [ "${WEFT_CLUSTER_COSCHEDULING:-0}" = 1 ] && { echo "cluster: WEFT_CLUSTER_COSCHEDULING needs real nodes (WEFT_CLUSTER_RUNTIME=containerd)" >&2; exit 2; }
  start_operator
  # Nodes are schedulable once Ready and the node controller has lifted the
  # not-ready taint the API server put on them at registration.
  ok=0
  for _ in $(seq 1 300); do
    n=$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.spec.taints}{"\n"}{end}' 2>/dev/null \
        | awk 'NF==1' | wc -l)
    [ "$n" -ge "${WEFT_CLUSTER_NODES:-1}" ] && { ok=1; break; }
    kill -0 "$(cat "$DIR/weft-node.pid")" 2>/dev/null || break
    sleep 0.1
  done
  [ $ok = 1 ] || { echo "cluster: nodes never became schedulable; see $DIR/logs/weft-node.log" >&2; tail -5 "$DIR/logs/weft-node.log" >&2; exit 1; }
  kill -0 "$(cat "$DIR/weft-operator.pid")" 2>/dev/null \
    || { echo "cluster: weft-operator exited; see $DIR/logs/weft-operator.log" >&2; tail -5 "$DIR/logs/weft-operator.log" >&2; exit 1; }
  [ -f "$DIR/operator.metrics" ] && echo "cluster: weft-operator metrics at http://$(cat "$DIR/operator.metrics")/metrics"
  [ "${WEFT_CLUSTER_METRICS:-0}" = 1 ] && "$HERE/metrics.sh" up "$DIR"
  echo "cluster: up in $(( ($(date +%s%N) - T0) / 1000000 )) ms (logs in $DIR/logs, pod logs in $DIR/node/logs)"
  echo "export KUBECONFIG=$DIR/kubeconfig"
  ;;
down)
  [ "$RUNTIME" = containerd ] && { containerd_down; exit 0; }
  "$HERE/coscheduling.sh" down "$DIR"
  "$HERE/kueue.sh" down "$DIR"
  for m in "$DIR"/metrics*/; do [ -d "$m" ] && "$HERE/metrics.sh" down "$DIR" "$(basename "$m" | sed -n 's/^metrics-//p')"; done
  stop_pid weft-operator
  stop_pid weft-node
  if [ -x "$BIN/weft-node" ] && [ -d "$DIR/node" ]; then "$BIN/weft-node" cleanup --state-dir "$DIR/node" >/dev/null || true; fi
  "$HERE/testenv.sh" stop "$DIR"
  echo "cluster: down"
  ;;
operator-kill)
  [ "$RUNTIME" = containerd ] && { containerd_operator_kill; exit 0; }
  [ -f "$DIR/weft-operator.pid" ] || { echo "cluster: no weft-operator pid in $DIR" >&2; exit 1; }
  pid=$(cat "$DIR/weft-operator.pid")
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$DIR/weft-operator.pid"
  echo "cluster: weft-operator $pid killed"
  ;;
operator-start)
  if [ "$RUNTIME" = containerd ]; then
    KUBECONFIG=$DIR/kubeconfig kubectl rollout status deployment/weft-operator -n "$OPNS" --timeout=180s
    exit 0
  fi
  start_operator
  sleep 0.5
  kill -0 "$(cat "$DIR/weft-operator.pid")" 2>/dev/null \
    || { echo "cluster: weft-operator exited; see $DIR/logs/weft-operator.log" >&2; exit 1; }
  echo "cluster: weft-operator $(cat "$DIR/weft-operator.pid") started"
  ;;
status)
  if [ "$RUNTIME" = containerd ]; then "$HERE/testenv.sh" status "$DIR" && "$HERE/nodes.sh" status "$DIR"; exit; fi
  "$HERE/testenv.sh" status "$DIR" && kill -0 "$(cat "$DIR/weft-node.pid")" && kill -0 "$(cat "$DIR/weft-operator.pid")"
  ;;
*) echo "cluster: unknown command '$CMD'" >&2; exit 2 ;;
esac
