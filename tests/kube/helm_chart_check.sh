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
. "$SRC/localcluster/kube-bin.sh"   # kubectl of the control plane's release first on PATH
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
  "--set operator.watchNamespace=$TEAM --set replicaCount=1 --set operator.leaderElect=false --set-json operator.extraArgs=[\"--tuning-poll-seconds=1\",\"--bind-address=\$(POD_IP)\"] --set-json operator.extraEnv=[{\"name\":\"POD_IP\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"status.podIP\"}}}]|ClusterRole Deployment|Role"
  "--set rbac.namespaced=true --set operator.watchNamespace=$TEAM|Role RoleBinding Deployment|ClusterRole ClusterRoleBinding"
  "--set rbac.namespaced=true --set operator.watchNamespace=$TEAM --set operator.leaderElect=false --set replicaCount=1|Role RoleBinding|ClusterRole"
  "--set rbac.namespaced=true --set operator.watchNamespace=$TEAM --set operator.kueue=true|Role RoleBinding ClusterRole ClusterRoleBinding Deployment|"
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
  # --kube-version: the API server's release (helm template's own default,
  # v1.32 for Helm 3.17, is below the chart's kubeVersion).
  # shellcheck disable=SC2086
  rendered=$("$HELM" template "m$i-$ID" "$CHART" --namespace "$ns" --kube-version "$WEFT_KUBE_VERSION" $values 2>&1) \
    || fail "helm template $values: $rendered"
  for kind in $want; do grep -q "^kind: $kind\$" <<<"$rendered" || fail "[$i] $values: renders no $kind"; done
  for kind in $unwanted; do ! grep -q "^kind: $kind\$" <<<"$rendered" || fail "[$i] $values: renders a $kind"; done
  out=$(kubectl apply -f - <<<"$rendered" 2>&1) || fail "[$i] API server rejects the chart ($values): $out"
  # No deprecated API, field or value (the API server's warnings).
  ! grep -qi 'warning' <<<"$out" || fail "[$i] the API server warns about the chart ($values): $out"
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
    *extraArgs=*)
      # After the chart's flags, and the env they name beside POD_NAME.
      c=$(kubectl get deploy -n "$ns" "m$i-$ID-weft-operator" -o jsonpath='{.spec.template.spec.containers[0].args[-2:]} {.spec.template.spec.containers[0].env[*].name} {.spec.template.spec.containers[0].env[1].valueFrom.fieldRef.fieldPath}' 2>&1)
      [ "$c" = '--tuning-poll-seconds=1 --bind-address=$(POD_IP) POD_NAME POD_IP status.podIP' ] \
        || fail "[$i] operator.extraArgs/extraEnv in the Deployment: '$c'" ;;
    *) ! has "--tuning-poll-seconds" || fail "[$i] an extra flag without operator.extraArgs" ;;
  esac
  case "$values" in
    *kueue=true*) has "- --kueue" || fail "[$i] operator.kueue=true does not reach the operator" ;;
    *) ! has "--kueue" || fail "[$i] --kueue without operator.kueue" ;;
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

# The other renderings the tests make: the e2e operator pod's values
# (tests/e2e/testdata/operator-pod-values.yaml, e2e_discovery) and
# localcluster/metrics.sh's scrape jobs; each a server-side dry run with no
# warning.
e2e_ns=hm-e2e-$ID
new_ns "$e2e_ns"
sed 's#__APISERVER_PORT__#6443#' "$SRC/tests/e2e/testdata/operator-pod-values.yaml" > "$DIR/helm-e2e-values.yaml"
for values in "-f $DIR/helm-e2e-values.yaml" \
              "--set metrics.scrapeConfig.enabled=true --set metrics.scrapeConfig.interval=2s --set metrics.workers.scrapeConfig.enabled=true --set metrics.workers.scrapeConfig.interval=2s --set operator.watchNamespace=$TEAM"; do
  # shellcheck disable=SC2086
  rendered=$("$HELM" template "e-$ID" "$CHART" --namespace "$e2e_ns" --kube-version "$WEFT_KUBE_VERSION" $values 2>&1) || fail "helm template $values: $rendered"
  out=$(kubectl apply --dry-run=server -f - <<<"$rendered" 2>&1) || fail "API server rejects the chart ($values): $out"
  ! grep -qi 'warning' <<<"$out" || fail "the API server warns about the chart ($values): $out"
  echo "ok (dry run) $values"
done

# Scraping (metrics.workers, metrics.scrapeConfig): the PodMonitor and the
# plain Prometheus scrape job carry the same relabelling rules, scoped to the
# watched namespace, with the labels the dashboard's variables read and the
# TrainingJob in trainingjob (job stays the scraper's); the operator's job
# keeps the tuner's labels (honor_labels); victoria-metrics, a real scraper
# with Kubernetes discovery, accepts both jobs unchanged with strict parsing
# (that they discover and label real pods is e2e_discovery's); the ConfigMaps
# apply to the API server.
tmp=$(mktemp -d)
rendered=$("$HELM" template "w-$ID" "$CHART" --namespace "$TEAM" --kube-version "$WEFT_KUBE_VERSION" --set operator.watchNamespace=$TEAM \
  --set metrics.workers.podMonitor.enabled=true --set metrics.workers.scrapeConfig.enabled=true \
  --set metrics.scrapeConfig.enabled=true 2>&1) \
  || fail "helm template with metrics.workers: $rendered"
printf '%s\n' "$rendered" > "$tmp/rendered.yaml"
out=$(/usr/bin/python3 - "$tmp/rendered.yaml" "$tmp/prometheus.yml" "$TEAM" "$SRC/charts/weft/dashboards" <<'PY' 2>&1
import glob, json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
pm = next(d for d in docs if d["kind"] == "PodMonitor")
cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-worker-scrape"))
job = yaml.safe_load(cm["data"]["weft-workers.yaml"])[0]
rename = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
rules = [{rename.get(k, k): v for k, v in r.items()} for r in pm["spec"]["podMetricsEndpoints"][0]["relabelings"]]
assert rules == job["relabel_configs"], ("the two forms differ", rules, job["relabel_configs"])
assert pm["spec"]["namespaceSelector"] == {"matchNames": [sys.argv[3]]}, pm["spec"]["namespaceSelector"]
assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": [sys.argv[3]]}}], job
assert {"action": "replace", "source_labels": ["__meta_kubernetes_pod_label_weft_dev_job"],
        "target_label": "trainingjob"} in rules, rules
assert not any(r.get("target_label") == "job" for r in rules), "job is the scraper's label"
ocm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-operator-scrape"))
op = yaml.safe_load(ocm["data"]["weft-operator.yaml"])[0]
assert op["honor_labels"] is True and op["job_name"] == "weft-operator", op
# Every label the dashboards' variables select on is set by a rule (rank is
# the worker's own).
targets = {r.get("target_label") for r in rules}
for path in glob.glob(sys.argv[4] + "/*.json"):
    for v in json.load(open(path))["templating"]["list"]:
        if v.get("type") == "datasource":
            continue
        name = v["name"]
        assert name in targets or name == "rank", (path, name, "no rule sets it")
open(sys.argv[2], "w").write(yaml.safe_dump({"scrape_configs": [job, op]}))
open(sys.argv[2].rsplit("/", 1)[0] + "/scrape-configmap.yaml", "w").write(yaml.safe_dump_all([cm, ocm]))
PY
) || fail "metrics.workers: $out"
if command -v victoria-metrics >/dev/null; then
  out=$(victoria-metrics -promscrape.config="$tmp/prometheus.yml" -promscrape.config.strictParse \
    -promscrape.config.dryRun -loggerLevel=ERROR 2>&1) || fail "victoria-metrics rejects the chart's scrape jobs: $out"
  checked="victoria-metrics accepts both jobs (strictParse)"
else
  checked="victoria-metrics not installed: the jobs' syntax unchecked"
fi
out=$(kubectl apply -n "$TEAM" -f "$tmp/scrape-configmap.yaml" 2>&1) \
  || fail "the scrape ConfigMaps do not apply: $out"
rm -rf "$tmp"
echo "ok scraping: PodMonitor and worker scrape job agree, trainingjob label, operator job with honor_labels; $checked"

# A real install (the CRD already exists: Helm leaves it), NOTES.txt, uninstall.
ns=hm-install-$ID
new_ns "$ns"
out=$("$HELM" install "inst-$ID" "$CHART" --namespace "$ns" --set replicaCount=1 2>&1) || fail "helm install: $out"
grep -q "rollout status deploy/inst-$ID-weft-operator" <<<"$out" || fail "NOTES.txt does not say how to check the rollout: $out"
kubectl get -n "$ns" deploy "inst-$ID-weft-operator" >/dev/null 2>&1 || fail "helm install created no Deployment"
out=$("$HELM" uninstall "inst-$ID" --namespace "$ns" 2>&1) || fail "helm uninstall: $out"

# Bad values fail before anything reaches the cluster, naming the field.
n_bad=0
bad() {  # bad "<helm args>" "<expected message>"
  n_bad=$((n_bad + 1))
  # shellcheck disable=SC2086
  out=$("$HELM" install "bad-$ID" "$CHART" --namespace "$ns" $1 2>&1) && fail "helm install $1 was accepted"
  grep -qF "$2" <<<"$out" || fail "helm install $1: message lacks '$2': $out"
}
bad "--set replicaCount=two" "replicaCount: Invalid type. Expected: integer, given: string"
bad "--set operator.logLevel=loud" "operator.logLevel must be one of the following"
bad "--set rbac.namespaced=true" "operator.watchNamespace: String length must be greater than or equal to 1"
bad "--set operator.leaderElect=false" "replicaCount: Must be less than or equal to 1"
bad "--set image.pullPolicy=Sometimes" "image.pullPolicy must be one of the following"
bad "--set operator.extraArgs=--workers=8" "operator.extraArgs: Invalid type. Expected: array, given: string"
bad "--set-json operator.extraEnv=[{\"value\":\"x\"}]" "operator.extraEnv.0: name is required"
bad "--set metrics.port=0" "metrics.port: Must be greater than or equal to 1"
bad "--set operatr.workers=2" "Additional property operatr is not allowed"
bad "--set metrics.workers.podMonitor.interval=often" "metrics.workers.podMonitor.interval: Does not match pattern"
# Bounded like the operator's flags, which refuse these with exit 2.
bad "--set operator.workers=100" "operator.workers: Must be less than or equal to 64"
bad "--set operator.leaseDurationSeconds=100000" "operator.leaseDurationSeconds: Must be less than or equal to 3600"
echo "PASS: helm lint; ${#MATRIX[@]} value sets rendered and applied to the API server; worker scraping; install/uninstall; $n_bad bad values refused"
