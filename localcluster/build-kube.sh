#!/bin/bash
# Builds the Kubernetes control plane the local cluster and the tests run:
# kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubelet, kubectl
# and etcd, from the Go module proxy, at the release a module of
# localcluster/ pins (VERSION, go.mod and go.sum there), into a cache outside
# the source tree. The module is WEFT_KUBE_VERSION's (kube-bin.sh:
# localcluster/kube, the current release, by default; localcluster/kube-1.35
# for `oldest` or 1.35.4), or the one --module names.
#
# Usage: localcluster/build-kube.sh [--check] [--module DIR] [cache-dir]
#   (default cache-dir ~/.cache/weft/kube-v<VERSION>)
#   --module DIR: build the module in DIR (e.g. localcluster/kube-1.35).
#   --check: build nothing, only verify that each module's VERSION and
#     go.mod agree (every module, or the one --module names).
# Result: <cache-dir>/bin/{kube-apiserver,kube-controller-manager,
#   kube-scheduler,kube-proxy,kubelet,kubectl,etcd}; `<bin> --version` reports VERSION.
# Idempotent and safe to run concurrently: a lock serialises builders, each
# binary is installed by an atomic rename, and the build is skipped when all
# of them exist (a new VERSION is a new cache directory). Needs Go >= the
# `go` line of the module's go.mod (1.26 for localcluster/kube), found or
# fetched by find-go.sh (which honours $GO). Modules come from GOPROXY (Go's
# module and build caches, ~/go/pkg/mod and ~/.cache/go-build by default,
# are reused).
# Measured: about 17 minutes the first time on 2 cores (empty Go caches),
# 16 s to relink from a warm Go build cache.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CHECK=0 MOD=
while [ $# -gt 0 ]; do
  case "$1" in
    --check) CHECK=1; shift ;;
    --module) MOD=$(cd "${2:?build-kube: --module needs a directory}" && pwd); shift 2 ;;
    --) shift; break ;;
    -*) echo "build-kube: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done

# VERSION is the one place a module names its release; go.mod must agree
# with it: k8s.io/kubernetes at v$VERSION and every k8s.io staging module
# replaced with v0.<minor>.<patch> (the release published with it).
check_versions() {  # check_versions MODULE-DIR
  local mod=$1 bad=0 line version minor_patch
  version=$(tr -d ' \n' < "$mod/VERSION")
  minor_patch=${version#1.}
  grep -Eq "^[[:space:]]*k8s\.io/kubernetes v$version\$" "$mod/go.mod" \
    || { echo "build-kube: $mod/go.mod does not require k8s.io/kubernetes v$version (VERSION)" >&2; bad=1; }
  while read -r line; do
    case "$line" in
      *" => "*" v0.$minor_patch") ;;
      *) echo "build-kube: $mod/go.mod replace '$line' is not v0.$minor_patch (VERSION $version)" >&2; bad=1 ;;
    esac
  done < <(grep -E '^[[:space:]]*k8s\.io/[a-z-]+ => ' "$mod/go.mod")
  [ "$(grep -Ec '^[[:space:]]*k8s\.io/[a-z-]+ => ' "$mod/go.mod")" -gt 20 ] \
    || { echo "build-kube: $mod/go.mod lists too few k8s.io replaces" >&2; bad=1; }
  # weft-node's default kubeletVersion is the current release's (cluster.sh
  # passes the running release's anyway).
  if [ "$mod" = "$HERE/kube" ]; then
    grep -q "kubelet_version = \"v$version\"" "$HERE/node/pod_status.h" \
      || { echo "build-kube: localcluster/node/pod_status.h's kubelet_version is not v$version" >&2; bad=1; }
  fi
  [ $bad = 0 ] && echo "build-kube: ${mod#"$HERE"/}: VERSION $version and go.mod agree"
  return $bad
}
if [ $CHECK = 1 ]; then
  bad=0
  if [ -n "$MOD" ]; then
    check_versions "$MOD" || bad=1
  else
    for m in "$HERE"/kube "$HERE"/kube-*; do
      [ -f "$m/VERSION" ] && { check_versions "$m" || bad=1; }
    done
  fi
  exit $bad
fi

if [ -z "$MOD" ]; then
  # shellcheck source=kube-bin.sh
  . "$HERE/kube-bin.sh"
  MOD=$WEFT_KUBE_MODULE
fi
check_versions "$MOD" >/dev/null
VERSION=$(tr -d ' \n' < "$MOD/VERSION")
MINOR_PATCH=${VERSION#1.}
CACHE=${1:-${WEFT_KUBE_CACHE:-$HOME/.cache/weft/kube-v$VERSION}}
BIN=$CACHE/bin
BINARIES="kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl etcd"

have_all() {
  local b
  for b in $BINARIES; do [ -x "$BIN/$b" ] || return 1; done
}
have_all && { echo "build-kube: cached in $BIN"; exit 0; }

mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9
have_all && { echo "build-kube: cached in $BIN (built by a concurrent run)"; exit 0; }

GO=$("$HERE/find-go.sh" "$MOD/go.mod") || exit 1

mkdir -p "$BIN"
LOG=$CACHE/build.log
echo "build-kube: building Kubernetes v$VERSION with $("$GO" env GOVERSION) (about 17 minutes on 2 cores the first time)"
# Like hack/lib/version.sh: the version the binaries (and `kubectl version`)
# report. The staging modules are ordinary modules here, so the symbols have
# no vendor/ prefix.
COMMIT=$(printf 'v%s' "$VERSION" | sha1sum | cut -c1-40)
LDFLAGS="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDFLAGS="$LDFLAGS -X $p.gitVersion=v$VERSION -X $p.gitMajor=1 -X $p.gitMinor=${MINOR_PATCH%%.*}"
  LDFLAGS="$LDFLAGS -X $p.gitTreeState=clean -X $p.gitCommit=$COMMIT -X $p.buildDate=1970-01-01T00:00:00Z"
done
STAGE=$CACHE/stage
rm -rf "$STAGE"
mkdir -p "$STAGE"
start=$(date +%s)
(
  cd "$MOD"
  export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=readonly
  "$GO" build -trimpath -buildvcs=false -ldflags "$LDFLAGS" -o "$STAGE/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kubectl
  "$GO" build -trimpath -buildvcs=false -ldflags "-s -w" -o "$STAGE/etcd" go.etcd.io/etcd/server/v3
) >"$LOG" 2>&1 || { tail -40 "$LOG" >&2; exit 1; }
for b in $BINARIES; do
  cp "$STAGE/$b" "$BIN/$b.tmp" && mv "$BIN/$b.tmp" "$BIN/$b"
done
rm -rf "$STAGE"
echo "build-kube: built in $(( $(date +%s) - start )) s into $BIN" | tee -a "$LOG"
"$BIN/kube-apiserver" --version
