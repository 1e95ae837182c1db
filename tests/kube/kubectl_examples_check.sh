#!/bin/bash
# The user's first step, checked with the real kubectl against the real API
# server: every example in manifests/examples applies cleanly (client- and
# server-side validation) and comes back with the CRD's defaults filled in;
# a broken manifest fails with a message naming each bad field; the install
# manifest (manifests/install.yaml) passes a server-side dry run.
# Usage: kubectl_examples_check.sh ENV_DIR SOURCE_DIR
set -uo pipefail
DIR=$1 SRC=$2
export KUBECONFIG=$DIR/kubeconfig
. "$SRC/localcluster/kube-bin.sh"   # kubectl of the control plane's release first on PATH
NS=kubectl-examples-$$
fail() { echo "FAIL: $*" >&2; kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1; exit 1; }
kubectl create namespace "$NS" >/dev/null || fail "cannot create namespace $NS"

n=0
for f in "$SRC"/manifests/examples/*.yaml; do
  out=$(kubectl apply -n "$NS" -f "$f" 2>&1) || fail "kubectl apply -f $f: $out"
  name=$(kubectl get -n "$NS" -f "$f" -o jsonpath='{.metadata.name}') || fail "cannot read back $f"
  # Defaults from the schema must be applied by the API server.
  port=$(kubectl get -n "$NS" tj "$name" -o jsonpath='{.spec.masterPort}')
  maxr=$(kubectl get -n "$NS" tj "$name" -o jsonpath='{.spec.restartPolicy.maxRestarts}')
  [ -n "$port" ] && [ -n "$maxr" ] || fail "$f: defaults not applied (masterPort='$port' maxRestarts='$maxr')"
  n=$((n + 1))
done
[ $n -ge 5 ] || fail "expected at least 5 examples, found $n"
# The short name and printer columns are what users type and read.
header=$(kubectl get tj -n "$NS" -o wide 2>&1 | sed -n 1p)
[[ "$header" =~ PHASE.*PODS.*RANKS.*STEP.*LOSS.*TOKENS/S.*OVERLAP.*BUCKET\ MB.*RESTARTS ]] || fail "printer columns missing: $header"

# kubectl's default (strict) validation is the server's own (since 1.27);
# with --validate=false the server's schema check still refuses it.
for v in --validate=strict --validate=false; do
  out=$(kubectl apply "$v" -n "$NS" -f "$SRC/tests/kube/testdata/broken-schema.yaml" 2>&1) \
    && fail "broken-schema.yaml was accepted ($v)"
  for want in 'spec.replicas' 'spec.imagePullPolicy: Unsupported value: "Sometimes"' \
              'spec.worker.parallel.strategy: Unsupported value: "tensor"' 'spec.image: Required value'; do
    grep -qF "$want" <<<"$out" || fail "server message ($v) lacks '$want': $out"
  done
done
# The operator's install manifest (rendered from the chart), the namespace,
# RBAC and CRD manifests and the examples are accepted by the API server with
# validation on and no warning (a deprecated API or field would print one).
# So are the manifests the e2e tests apply and the PodGroup CRDs as
# scheduler-plugins and Volcano publish them (the operator writes PodGroups).
# The e2e tests fill in their placeholders (tests/e2e/lib.sh apply_testdata);
# here with values procs_per_pod.sh uses.
e2e_manifests=()
mkdir -p "$DIR/e2e-manifests"
for f in "$SRC"/tests/e2e/testdata/*.yaml; do
  grep -q '^kind:' "$f" || continue
  out=$DIR/e2e-manifests/${f##*/}
  sed -e 's#__CKPT__#/tmp/weft-ckpt#g' -e 's/__NAME__/procs/' -e 's/__PODS__/2/' -e 's/__PROCS__/3/' \
      -e 's/__STEPS__/30/' -e 's/__PARALLEL__/{strategy: isp, sp: 2, wp: 2}/' "$f" > "$out"
  ! grep -q '__[A-Z_]*__' "$out" || fail "$f: a placeholder this check does not fill: $(grep -o '__[A-Z_]*__' "$out")"
  e2e_manifests+=("$out")
done
[ ${#e2e_manifests[@]} -ge 8 ] || fail "expected at least 8 e2e manifests, found ${#e2e_manifests[@]}"
for f in "$SRC/manifests/install.yaml" "$SRC/manifests/namespace.yaml" "$SRC/manifests/rbac/" "$SRC/manifests/crd/" \
         "$SRC"/manifests/examples/*.yaml "${e2e_manifests[@]}" "$SRC"/tests/kube/testdata/*-podgroups.yaml; do
  case "$f" in */examples/*|*/e2e-manifests/*) ns=(-n "$NS") ;; *) ns=() ;; esac
  out=$(kubectl apply --dry-run=server "${ns[@]}" -f "$f" 2>&1) || fail "$f rejected: $out"
  ! grep -qi 'warning' <<<"$out" || fail "$f: the API server warns: $out"
done
kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1
echo "PASS: $n examples applied with defaults; broken manifest rejected with field-level messages"
