#!/bin/bash
# One source of truth: manifests/install.yaml and manifests/rbac/rbac.yaml
# are the chart's rendering (scripts/render-install.sh). Fails with the diff
# when the chart changed and the files were not rendered again.
# Usage: install_manifests_check.sh SOURCE_DIR
set -uo pipefail
SRC=$1
HELM=$("$SRC/tests/kube/get-helm.sh"); rc=$?
[ $rc = 0 ] || exit $rc
HELM=$HELM "$SRC/scripts/render-install.sh" --check || exit 1
for kind in Namespace CustomResourceDefinition ServiceAccount ClusterRole ClusterRoleBinding Role RoleBinding Deployment Service NetworkPolicy; do
  grep -q "^kind: $kind\$" "$SRC/manifests/install.yaml" || { echo "FAIL: manifests/install.yaml has no $kind" >&2; exit 1; }
done
echo "PASS: manifests/install.yaml and manifests/rbac/rbac.yaml are the chart's rendering"
