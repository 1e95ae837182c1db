#!/bin/bash
# The Helm chart as users meet it, against the real API server of the kube
# fixture: `helm lint`; `helm template` over a matrix of values, each
# rendering applied for real with kubectl (then deleted); a real
# `helm install` / `helm uninstall` that prints NOTES.txt; bad values refused
# by values.schema.json with a message naming the field. The chart's CRD must
# be the one in manifests/crd.
# Usage: helm_chart_check.sh ENV_DIR SOURCE_DIR
set -uo pipefail
DIR=$1 SRC=$2
export KUBECONFIG=$DIR/kubeconfig
HELM=$("$SRC/tests/kube/get-helm.sh"); rc=$?
[ $rc = 0 ] || exit $rc
CHART=$SRC/charts/weft
ID=$$
NAMESPACES=()
cleanup() { for n in "${NAMESPACES[@]}"; do kubectl delete namespace "$n" --wait=false >/dev/null 2>&1; done; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
new_ns() { kubectl create namespace "$1" >/dev/null || fail "cannot create namespace $1"; NAMESPACES+=("$1"); }

cmp -s "$SRC/manifests/crd/weft.dev_trainingjobs.yaml" "$CHART/crds/weft.dev_trainingjobs.yaml" \
  || fail "charts/weft/crds/ differs from manifests/crd/ (copy it over)"
out=$("$HELM" lint "$CHART" 2>&1) || fail "helm lint: $out"

# The matrix: "values | kinds the rendering must contain | kinds it must not".
TEAM=hm-team-$ID
MATRIX=(
  "|ServiceAccount ClusterRole ClusterRoleBinding Role RoleBinding Deployment Service ConfigMap NetworkPolicy|"
  "--set operator.watchNamespace=$TEAM --set replicaCount=1 --set operator.leaderElect=false|ClusterRole Deployment|Role"
  "--set rbac.namespaced=true --set operator.watchNamespace=$TEAM|Role RoleBinding Deployment|ClusterRole ClusterRoleBinding"
  "--set rbac.namespaced=true --set operator.watchNamespace=$TEAM --set operator.leaderElect=false --set replicaCount=1|Role RoleBinding|ClusterRole"
  "--set operator.allowHostPath=true --set operator.allowServiceAccount=true --set operator.allowHostNetwork=true --set-json networkPolicy.metricsFrom=[{\"namespaceSelector\":{\"matchLabels\":{\"name\":\"monitoring\"}}}]|NetworkPolicy ClusterRole|"
  "--set serviceAccount.create=false --set serviceAccount.name=default --set metrics.service.enabled=false --set dashboards.enabled=false --set image.tag=dev --set networkPolicy.perJob=false --set networkPolicy.operator=false|ClusterRole Deployment|ServiceAccount Service ConfigMap NetworkPolicy"
)
new_ns "$TEAM"
i=0
for row in "${MATRIX[@]}"; do
  IFS='|' read -r values want unwanted <<<"$row"
  i=$((i + 1))
  ns=hm-$i-$ID
  new_ns "$ns"
  # shellcheck disable=SC2086
  rendered=$("$HELM" template "m$i-$ID" "$CHART" --namespace "$ns" $values 2>&1) \
    || fail "helm template $values: $rendered"
  for kind in $want; do grep -q "^kind: $kind\$" <<<"$rendered" || fail "[$i] $values: renders no $kind"; done
  for kind in $unwanted; do ! grep -q "^kind: $kind\$" <<<"$rendered" || fail "[$i] $values: renders a $kind"; done
  out=$(kubectl apply -f - <<<"$rendered" 2>&1) || fail "[$i] API server rejects the chart ($values): $out"
  case "$values" in
    *watchNamespace=*) grep -q -- "--namespace=$TEAM" <<<"$rendered" || fail "[$i] watchNamespace is not passed to the operator" ;;
  esac
  # The operator's flags follow the values; the per-job policies are the
  # operator's (tests/operator/integration/job_security_it.cc), the chart
  # only guards the operator's own pods.
  args=$(sed -n '/^kind: Deployment$/,$p' <<<"$rendered")
  has() { grep -qF -- "$1" <<<"$args"; }
  case "$values" in
    *allowHostPath=true*) has "- --allow-host-path" && has "- --allow-service-account" && has "- --allow-host-network" || fail "[$i] allow flags not passed" ;;
    *) ! has "--allow-" || fail "[$i] an --allow- flag without its value" ;;
  esac
  case "$values" in
    *perJob=false*) has "- --no-network-policy" || fail "[$i] networkPolicy.perJob=false does not reach the operator" ;;
    *) ! has "--no-network-policy" || fail "[$i] --no-network-policy without networkPolicy.perJob=false" ;;
  esac
  case "$values" in
    *metricsFrom=*)
      has '--network-policy-metrics-from=[{\"namespaceSelector\":{\"matchLabels\":{\"name\":\"monitoring\"}}},' \
        || fail "[$i] metricsFrom does not reach the operator"
      pol=$(kubectl get networkpolicy -n "$ns" "m$i-$ID-weft-operator" -o jsonpath='{.spec.ingress[0].ports[0].port} {.spec.ingress[0].from[0].namespaceSelector.matchLabels.name} {.spec.ingress[1].ports[0].port}' 2>&1)
      [ "$pol" = "8080 monitoring 8081" ] || fail "[$i] the operator's NetworkPolicy: '$pol'" ;;
  esac
  kubectl delete --wait=false -f - <<<"$rendered" >/dev/null 2>&1
  echo "ok [$i] ${values:-(defaults)}"
done

# A real install (the CRD already exists: Helm leaves it), NOTES.txt, uninstall.
ns=hm-install-$ID
new_ns "$ns"
out=$("$HELM" install "inst-$ID" "$CHART" --namespace "$ns" --set replicaCount=1 2>&1) || fail "helm install: $out"
grep -q "rollout status deploy/inst-$ID-weft-operator" <<<"$out" || fail "NOTES.txt does not say how to check the rollout: $out"
kubectl get -n "$ns" deploy "inst-$ID-weft-operator" >/dev/null 2>&1 || fail "helm install created no Deployment"
out=$("$HELM" uninstall "inst-$ID" --namespace "$ns" 2>&1) || fail "helm uninstall: $out"

# Bad values fail before anything reaches the cluster, naming the field.
bad() {  # bad "<helm args>" "<expected message>"
  # shellcheck disable=SC2086
  out=$("$HELM" install "bad-$ID" "$CHART" --namespace "$ns" $1 2>&1) && fail "helm install $1 was accepted"
  grep -qF "$2" <<<"$out" || fail "helm install $1: message lacks '$2': $out"
}
bad "--set replicaCount=two" "replicaCount: Invalid type. Expected: integer, given: string"
bad "--set operator.logLevel=loud" "operator.logLevel must be one of the following"
bad "--set rbac.namespaced=true" "operator.watchNamespace: String length must be greater than or equal to 1"
bad "--set operator.leaderElect=false" "replicaCount: Must be less than or equal to 1"
bad "--set image.pullPolicy=Sometimes" "image.pullPolicy must be one of the following"
bad "--set metrics.port=0" "metrics.port: Must be greater than or equal to 1"
bad "--set operatr.workers=2" "Additional property operatr is not allowed"
echo "PASS: helm lint; ${#MATRIX[@]} value sets rendered and applied to the API server; install/uninstall; 7 bad values refused"
