#!/usr/bin/env bash
# The chart ships the Grafana dashboards: `helm template` renders
# templates/grafana-dashboard-configmap.yaml into a ConfigMap labelled
# grafana_dashboard whose data holds every charts/weft/dashboards/*.json
# byte for byte, and enabled=false renders nothing. Exit 77 (skip) without helm.
set -euo pipefail
SRC=${1:?usage: chart_dashboard_check.sh WEFT_SOURCE_DIR}
HELM=${HELM:-}
if [ -z "$HELM" ] && [ -x "$SRC/tests/kube/get-helm.sh" ]; then HELM=$("$SRC/tests/kube/get-helm.sh" || true); fi
if [ -z "$HELM" ]; then HELM=$(command -v helm || true); fi
if [ -z "$HELM" ]; then echo "SKIP: no helm (tests/kube/get-helm.sh or PATH)"; exit 77; fi

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# The template and the dashboards only, in a minimal chart, so this check
# does not depend on the rest of the chart's values.
mkdir -p "$W/weft/templates"
cp -r "$SRC/charts/weft/dashboards" "$W/weft/"
cp "$SRC/charts/weft/templates/grafana-dashboard-configmap.yaml" "$W/weft/templates/"
printf 'apiVersion: v2\nname: weft\nversion: 0.0.0\n' > "$W/weft/Chart.yaml"

"$HELM" template rel "$W/weft" --namespace ml > "$W/out.yaml"
/usr/bin/python3 - "$W/out.yaml" "$SRC/charts/weft/dashboards" <<'PY'
import glob, json, os, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
assert len(docs) == 1, f"expected one ConfigMap, got {len(docs)}"
cm = docs[0]
assert cm["kind"] == "ConfigMap", cm["kind"]
assert cm["metadata"]["labels"].get("grafana_dashboard") == "1", cm["metadata"]["labels"]
assert cm["metadata"]["namespace"] == "ml"
files = sorted(glob.glob(os.path.join(sys.argv[2], "*.json")))
assert files, "no dashboards"
for f in files:
    key = os.path.basename(f)
    assert key in cm["data"], f"{key} missing from the ConfigMap"
    assert json.loads(cm["data"][key]) == json.load(open(f)), f"{key} differs from the file"
print(f"ok: {len(files)} dashboard(s) in ConfigMap {cm['metadata']['name']}")
PY
test -z "$("$HELM" template rel "$W/weft" --set grafanaDashboards.enabled=false | grep -v '^\s*$' || true)" \
  || { echo "FAIL: grafanaDashboards.enabled=false still renders a ConfigMap"; exit 1; }
echo "ok: disabled renders nothing"
