#!/bin/bash
# Scale benchmark on the local cluster (localcluster/cluster.sh): `kubectl
# apply` of TrainingJobs of 8, 64 and 256 ranks whose pods run a no-op
# command, timed to all pods created and to all pods Running (scheduled by
# the real kube-scheduler, started by weft-node). weft-operator runs with its
# default flags. Usage:
#   tests/bench/cluster_scale.sh [BUILD_DIR] [extra operator_bench flags...]
# Results: BUILD_DIR/bench/cluster_scale.json and a Markdown table on stdout.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
shift || true
DIR=$(mktemp -d /tmp/weft-cluster-scale.XXXXXX)
trap '"$SRC/localcluster/cluster.sh" down "$DIR/cluster" "$BUILD" >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT

# The no-op worker: stays up until the pod is deleted.
mkdir -p "$DIR/bin"
cat > "$DIR/bin/weft-worker" <<'SH'
#!/bin/sh
trap 'exit 143' TERM
sleep 3600 & wait
SH
chmod +x "$DIR/bin/weft-worker"

# 3 nodes of 110 pods hold the 8 + 64 + 256 ranks at once.
WEFT_CLUSTER_NODES=3 WEFT_NODE_CPU=1000 WEFT_CLUSTER_BIN_DIR="$DIR/bin" \
  "$SRC/localcluster/cluster.sh" up "$DIR/cluster" "$BUILD" >/dev/null
# The benchmark starts its own weft-operator, watching only its namespace.
"$SRC/localcluster/cluster.sh" operator-kill "$DIR/cluster" "$BUILD" >/dev/null
mkdir -p "$BUILD/bench"
"$BUILD/bin/weft_operator_bench" --kubeconfig "$DIR/cluster/kubeconfig" --operator-bin "$BUILD/bin/weft-operator" \
  --running --idle-jobs 0 --out "$BUILD/bench/cluster_scale.json" "$@"
