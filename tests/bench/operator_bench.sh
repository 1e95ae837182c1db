#!/bin/bash
# Runs the weft-operator benchmark on a private control plane (tests/kube
# testenv, started and stopped here). Usage:
#   tests/bench/operator_bench.sh [BUILD_DIR] [extra operator_bench flags...]
# Results: BUILD_DIR/bench/operator_bench.json and a Markdown table on stdout.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
shift || true
DIR=$(mktemp -d /tmp/weft-operator-bench.XXXXXX)
trap '"$SRC/localcluster/testenv.sh" stop "$DIR"; rm -rf "$DIR"' EXIT
"$SRC/localcluster/build-kube.sh" >/dev/null
. "$SRC/localcluster/kube-bin.sh"   # kubectl of the control plane's release first on PATH
"$SRC/localcluster/testenv.sh" start "$DIR" >/dev/null
kubectl --kubeconfig "$DIR/kubeconfig" apply --validate=false -f "$SRC/manifests/crd/" >/dev/null
kubectl --kubeconfig "$DIR/kubeconfig" wait --for condition=established crd/trainingjobs.weft.dev >/dev/null
mkdir -p "$BUILD/bench"
"$BUILD/bin/weft_operator_bench" --kubeconfig "$DIR/kubeconfig" --operator-bin "$BUILD/bin/weft-operator" \
  --out "$BUILD/bench/operator_bench.json" "$@"
