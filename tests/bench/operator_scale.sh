#!/bin/bash
# The operator at 1 024 ranks on the real API server (docs/benchmarks/operator-scale.md):
# the local cluster (localcluster/cluster.sh) with weft-node simulating pods
# (--simulate-pods: no processes; every pod Running with its IP and its ranks'
# canned /metrics, as kwok does), then weft_operator_bench with its own
# weft-operator: a TrainingJob of 1 024 pods x 1 rank and one of 128 pods x 8
# ranks, both with spec.stragglers (every pod's rank 0 scraped every 2 s):
# apply -> all pods created -> all Running, API calls by verb (the operator's
# own count and the API server's apiserver_request_total), status.progress,
# the scrape poller's pass time over a window, operator CPU and RSS, and a
# gang restart after one pod is deleted. Usage:
#   tests/bench/operator_scale.sh [BUILD_DIR] [extra operator_bench flags...]
# Env: WEFT_SCALE_SHAPES (default "1024x1 128x8": pods x ranks per pod),
#      WEFT_SCALE_OBSERVE (seconds of poller window, default 30),
#      WEFT_OPERATOR_BIN (the weft-operator to measure; default BUILD_DIR/bin/weft-operator).
# Results: BUILD_DIR/bench/operator_scale-<pods>x<ranks>.json and the tables on stdout.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
shift || true
DIR=$(mktemp -d /tmp/weft-operator-scale.XXXXXX)
trap '"$SRC/localcluster/cluster.sh" down "$DIR/cluster" "$BUILD" >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT

echo "# weft $(git -C "$SRC" rev-parse --short HEAD)$(git -C "$SRC" diff --quiet HEAD -- 2>/dev/null || echo '+dirty') on $(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
# 4 nodes of 300 pods hold 1 024 pods. The agent's own client limit is lifted
# so that its status writes are not what the launch waits on (a kubelet's
# are per node, 1 024 pods would be spread over many).
WEFT_CLUSTER_NODES=4 WEFT_NODE_CPU=10000 \
  WEFT_NODE_ARGS="--simulate-pods --pods 300 --qps 1000 --burst 1000" \
  "$SRC/localcluster/cluster.sh" up "$DIR/cluster" "$BUILD" >/dev/null
"$SRC/localcluster/cluster.sh" operator-kill "$DIR/cluster" "$BUILD" >/dev/null
mkdir -p "$BUILD/bench"
for shape in ${WEFT_SCALE_SHAPES:-1024x1 128x8}; do
  pods=${shape%x*} procs=${shape#*x}
  echo "## $pods pods x $procs ranks"
  "$BUILD/bin/weft_operator_bench" --kubeconfig "$DIR/cluster/kubeconfig" --operator-bin "${WEFT_OPERATOR_BIN:-$BUILD/bin/weft-operator}" \
    --running --idle-jobs 0 --sizes "$pods" --procs-per-pod "$procs" --stragglers \
    --observe-seconds "${WEFT_SCALE_OBSERVE:-30}" --restart \
    --out "$BUILD/bench/operator_scale-${pods}x${procs}.json" "$@"
  # The next shape starts once the agent has ended every pod of this one.
  for _ in $(seq 1 600); do
    [ "$(kubectl --kubeconfig "$DIR/cluster/kubeconfig" get pods -A -o name 2>/dev/null | wc -l)" = 0 ] && break
    sleep 0.5
  done
done
