#!/usr/bin/env bash
# The chart ships the Grafana dashboards: `helm template` renders the chart's
# templates/dashboards.yaml (owned by the chart) into ConfigMaps labelled
# grafana_dashboard whose data hold every charts/weft/dashboards/*.json as
# the same JSON, and dashboards.enabled=false ships none. Exit 77 (skip)
# without helm.
set -euo pipefail
SRC=${1:?usage: chart_dashboard_check.sh WEFT_SOURCE_DIR}
HELM=${HELM:-}
if [ -z "$HELM" ] && [ -x "$SRC/tests/kube/get-helm.sh" ]; then HELM=$("$SRC/tests/kube/get-helm.sh" || true); fi
if [ -z "$HELM" ]; then HELM=$(command -v helm || true); fi
if [ -z "$HELM" ]; then echo "SKIP: no helm (tests/kube/get-helm.sh or PATH)"; exit 77; fi

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
CHART="$SRC/charts/weft"
# The oldest Kubernetes the chart supports (its kubeVersion; helm template's
# default, v1.32 for Helm 3.17, is below it).
KUBE=$(sed -n 's/^kubeVersion: *">=\([0-9.]*\)-0"$/\1/p' "$CHART/Chart.yaml")
"$HELM" template rel "$CHART" --namespace ml --kube-version "${KUBE:?no kubeVersion in Chart.yaml}" \
  --show-only templates/dashboards.yaml > "$W/out.yaml"
/usr/bin/python3 - "$W/out.yaml" "$CHART/dashboards" <<'PY'
import glob, json, os, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
files = sorted(glob.glob(os.path.join(sys.argv[2], "*.json")))
assert files, "no dashboards"
data = {}
for cm in docs:
    assert cm["kind"] == "ConfigMap", cm["kind"]
    assert cm["metadata"]["labels"].get("grafana_dashboard") == "1", cm["metadata"]["labels"]
    assert cm["metadata"]["namespace"] == "ml"
    data.update(cm["data"])
for f in files:
    key = os.path.basename(f)
    assert key in data, f"{key} missing from the dashboard ConfigMaps"
    assert json.loads(data[key]) == json.load(open(f)), f"{key} differs from the file"
print(f"ok: {len(files)} dashboard(s) in {len(docs)} ConfigMap(s)")
PY
"$HELM" template rel "$CHART" --kube-version "$KUBE" --set dashboards.enabled=false > "$W/off.yaml"
grep -q 'kind: Deployment' "$W/off.yaml" || { echo "FAIL: the chart rendered nothing"; exit 1; }
if grep -q '\.json: |' "$W/off.yaml"; then
  echo "FAIL: dashboards.enabled=false still ships the dashboard"
  exit 1
fi
echo "ok: dashboards.enabled=false ships none"
