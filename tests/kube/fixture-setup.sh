#!/bin/bash
# ctest fixture `kube`: builds the control plane once (cached), starts it in
# DIR, installs the TrainingJob CRD and the gang schedulers' PodGroup CRDs and
# waits until they are served.
# Usage: fixture-setup.sh DIR SOURCE_DIR
set -euo pipefail
DIR=$1 SRC=$2
"$SRC/localcluster/build-kube.sh"
# shellcheck source=../../localcluster/kube-bin.sh
. "$SRC/localcluster/kube-bin.sh"   # kubectl of the control plane's release
mkdir -p "$DIR"
"$SRC/localcluster/testenv.sh" start "$DIR"
export KUBECONFIG=$DIR/kubeconfig
# Validated like any apply (strict field validation by the server), whose
# API server compiles and enforces the CRD's CEL rules.
kubectl apply -f "$SRC/manifests/crd/" >/dev/null
# The gang schedulers' PodGroup CRDs, as their projects publish them (the
# operator's gang scheduling creates these).
kubectl apply -f "$SRC/tests/kube/testdata/scheduler-plugins-podgroups.yaml" \
  -f "$SRC/tests/kube/testdata/volcano-podgroups.yaml" >/dev/null
kubectl wait --for condition=established --timeout=60s crd/trainingjobs.weft.dev \
  crd/podgroups.scheduling.x-k8s.io crd/podgroups.scheduling.volcano.sh >/dev/null
kubectl apply -f "$SRC/manifests/namespace.yaml" -f "$SRC/manifests/rbac/" >/dev/null
echo "kube fixture ready: KUBECONFIG=$KUBECONFIG"
