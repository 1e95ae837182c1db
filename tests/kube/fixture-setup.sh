#!/bin/bash
# ctest fixture `kube`: builds the control plane once (cached), starts it in
# DIR, installs the TrainingJob CRD and waits until it is served.
# Usage: fixture-setup.sh DIR SOURCE_DIR
set -euo pipefail
DIR=$1 SRC=$2
HERE=$(cd "$(dirname "$0")" && pwd)
"$HERE/build-kube.sh"
mkdir -p "$DIR"
"$HERE/testenv.sh" start "$DIR"
export KUBECONFIG=$DIR/kubeconfig
# v1.20's OpenAPI has no x-kubernetes-validations (CEL): client-side validation
# would reject the field, the server itself ignores it.
kubectl apply --validate=false -f "$SRC/manifests/crd/" >/dev/null
kubectl wait --for condition=established --timeout=60s crd/trainingjobs.weft.dev >/dev/null
kubectl apply -f "$SRC/manifests/namespace.yaml" -f "$SRC/manifests/rbac/" >/dev/null
echo "kube fixture ready: KUBECONFIG=$KUBECONFIG"
