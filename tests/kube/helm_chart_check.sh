#!/bin/bash
# The Helm chart as users meet it: `helm lint` passes, `helm template`
# renders, and every rendered object is accepted by the real API server
# (server-side dry run). The chart's CRD must be the one in manifests/crd.
# Usage: helm_chart_check.sh ENV_DIR SOURCE_DIR
set -uo pipefail
DIR=$1 SRC=$2
export KUBECONFIG=$DIR/kubeconfig
HELM=$("$SRC/tests/kube/get-helm.sh"); rc=$?
[ $rc = 0 ] || exit $rc
fail() { echo "FAIL: $*" >&2; exit 1; }
cmp -s "$SRC/manifests/crd/weft.dev_trainingjobs.yaml" "$SRC/charts/weft/crds/weft.dev_trainingjobs.yaml" \
  || fail "charts/weft/crds/ differs from manifests/crd/ (copy it over)"
out=$("$HELM" lint "$SRC/charts/weft" 2>&1) || fail "helm lint: $out"
for values in "" "--set operator.watchNamespace=team-a --set replicaCount=1 --set operator.leaderElect=false"; do
  # shellcheck disable=SC2086
  rendered=$("$HELM" template weft "$SRC/charts/weft" --namespace weft-system $values 2>&1) \
    || fail "helm template $values: $rendered"
  for kind in ServiceAccount ClusterRole ClusterRoleBinding Deployment Service; do
    grep -q "^kind: $kind\$" <<<"$rendered" || fail "helm template $values renders no $kind"
  done
  out=$(kubectl apply --dry-run=server -f - <<<"$rendered" 2>&1) || fail "API server rejects the chart ($values): $out"
done
grep -q -- "--namespace=team-a" <<<"$rendered" || fail "operator.watchNamespace is not passed to the operator"
echo "PASS: helm lint, template (2 value sets) and server-side dry run"
