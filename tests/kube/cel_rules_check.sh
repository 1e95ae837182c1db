#!/bin/bash
# The TrainingJob CRD's cross-field rules (x-kubernetes-validations, CEL)
# enforced by the API server itself: every case of
# tests/kube/testdata/cel-cases.yaml (the table weft-operator's own
# validation is unit-tested with, tests/operator/cel_cases_test.cc) is
# `kubectl apply`d; a reject must be refused with its rule's message, an
# accept stored. Every rule of the CRD must have a reject and an accept case
# (a case that changes the rule's object), and every message in the table
# must be a rule's. Every release the fixture runs (kube-bin.sh) evaluates
# CEL (>= 1.25).
# Usage: cel_rules_check.sh ENV_DIR SOURCE_DIR
set -uo pipefail
DIR=$1 SRC=$2
export KUBECONFIG=$DIR/kubeconfig
. "$SRC/localcluster/kube-bin.sh"   # kubectl of the control plane's release first on PATH
NS=cel-rules-$$
TMP=$(mktemp -d)
cleanup() { kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
kubectl create namespace "$NS" >/dev/null || fail "cannot create namespace $NS"

# One manifest per case (TSV index: file, verdict, message), and the table
# checked against the CRD's rules.
/usr/bin/python3 - "$SRC/tests/kube/testdata/cel-cases.yaml" "$SRC/manifests/crd/weft.dev_trainingjobs.yaml" \
  "$TMP" > "$TMP/index.tsv" <<'PY' || fail "the case table does not match the CRD's rules"
import json, sys, yaml
table, crd_path, out = sys.argv[1:4]
t = yaml.safe_load(open(table))
crd = yaml.safe_load(open(crd_path))

rules = {}  # message -> path of the object the rule sits on
def walk(node, path):
    if isinstance(node, dict):
        for r in node.get("x-kubernetes-validations", []):
            rules[r["message"]] = path
        for k, v in node.get("properties", {}).items():
            walk(v, path + [k])
walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"], [])

def merge(a, b):
    if isinstance(a, dict) and isinstance(b, dict):
        r = dict(a)
        for k, v in b.items():
            r[k] = merge(a.get(k), v)
        return r
    return b

def touches(spec, path):
    for k in path:
        if not isinstance(spec, dict) or k not in spec:
            return False
        spec = spec[k]
    return True

bad = []
rejected, accepted = set(), set()
for c in t["cases"]:
    spec = merge(t["base"], c["spec"])
    if c["verdict"] == "reject":
        if c.get("message") not in rules:
            bad.append(f"case {c['name']}: message {c.get('message')!r} is no rule's message in the CRD")
        rejected.add(c.get("message"))
    else:
        assert c["verdict"] == "accept", c
        accepted.update(m for m, p in rules.items() if touches(c["spec"], p))
    job = {"apiVersion": "weft.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": "cel-" + c["name"]}, "spec": spec}
    f = f"{out}/{c['name']}.json"
    json.dump(job, open(f, "w"))
    print(f"{f}\t{c['verdict']}\t{c.get('message', '')}")
for m in rules:
    if m not in rejected:
        bad.append(f"no reject case for the CRD rule {m!r}")
    if m not in accepted:
        bad.append(f"no accept case that sets the object of the CRD rule {m!r} ({'.'.join(['spec'] + rules[m])})")
if len(rules) < 9:
    bad.append(f"only {len(rules)} rules found in the CRD")
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY

n_acc=0 n_rej=0
while IFS=$'\t' read -r f verdict message; do
  name=$(basename "$f" .json)
  out=$(kubectl apply -n "$NS" -f "$f" 2>&1); rc=$?
  if [ "$verdict" = accept ]; then
    [ $rc = 0 ] || fail "$name: refused, but the table says accept: $out"
    [ -z "$(grep -i warning <<<"$out")" ] || fail "$name: accepted with a warning: $out"
    n_acc=$((n_acc + 1))
  else
    [ $rc != 0 ] || fail "$name: accepted, but the table says reject (rule '$message'): $out"
    grep -qF "$message" <<<"$out" || fail "$name: refused without the rule's message '$message': $out"
    n_rej=$((n_rej + 1))
  fi
done < "$TMP/index.tsv"
[ $((n_acc + n_rej)) -gt 0 ] || fail "no cases run"
# Nothing refused was stored.
stored=$(kubectl get tj -n "$NS" -o name | wc -l)
[ "$stored" = "$n_acc" ] || fail "$stored TrainingJobs stored, $n_acc accepted"
echo "PASS: $n_rej cases refused with their rule's message, $n_acc accepted ($(kubectl version -o json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])'))"
