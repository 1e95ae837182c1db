#!/bin/bash
# Builds what a real node of the local cluster runs besides the kubelet
# (build-kube.sh builds that one) from the Go module proxy, each program
# through a pinned module of the project's own under localcluster/node-runtime/
# (go.mod names the release, go.sum fixes every module's hash):
#   containerd, containerd-shim-runc-v2, ctr   containerd 2.x, the container runtime
#   runc                                        the OCI runtime (cgo, libseccomp)
#   cni/bridge, cni/host-local, cni/loopback, cni/portmap   the CNI plugins
#   coredns                                     the cluster DNS
#   crictl                                      the CRI client (node clean-up, tests)
# and the sandbox ("pause") image: Kubernetes' own pause.c from the
# k8s.io/kubernetes module of localcluster/kube, compiled static, in an OCI
# archive made by buildah (no registry can be pulled from here).
#
# Everything lands in ~/.cache/weft/node-runtime-<key>/ (WEFT_NODE_RUNTIME_CACHE),
# the key a hash of the modules and this script, built once under a lock and
# installed by atomic renames; a rebuild happens only when a pin changes.
# Usage: localcluster/build-node-runtime.sh [--print-dir]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MODS=$HERE/node-runtime
KUBE_MOD=$HERE/kube
KEY=$(cat "$0" "$MODS"/*/go.mod "$MODS"/*/go.sum "$KUBE_MOD/VERSION" | sha256sum | cut -c1-12)
CACHE=${WEFT_NODE_RUNTIME_CACHE:-$HOME/.cache/weft/node-runtime-$KEY}
BIN=$CACHE/bin
if [ "${1:-}" = --print-dir ]; then echo "$CACHE"; exit 0; fi

PROGRAMS="containerd containerd-shim-runc-v2 ctr runc coredns crictl cni/bridge cni/host-local cni/loopback cni/portmap"
have_all() {
  local p
  for p in $PROGRAMS; do [ -x "$BIN/$p" ] || return 1; done
  [ -f "$CACHE/pause.tar" ]
}
have_all && { echo "build-node-runtime: cached in $CACHE"; exit 0; }
mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9
have_all && { echo "build-node-runtime: cached in $CACHE (built by a concurrent run)"; exit 0; }

GO=$("$HERE/find-go.sh" "$MODS"/*/go.mod) || exit 1
[ -f /usr/include/seccomp.h ] || { echo "build-node-runtime: runc needs libseccomp's headers: run scripts/install-deps.sh kube" >&2; exit 1; }
command -v buildah >/dev/null || { echo "build-node-runtime: buildah not found: run scripts/install-deps.sh images" >&2; exit 1; }
version_of() {  # version_of MODULE_DIR MODULE_PATH: the version its go.mod requires
  local v
  v=$(sed -n "s#^\(require \)\{0,1\}[[:space:]]*$2 \(v[^ ]*\).*#\2#p" "$MODS/$1/go.mod" | head -1)
  [ -n "$v" ] || { echo "build-node-runtime: $1/go.mod requires no $2" >&2; exit 1; }
  echo "$v"
}

STAGE=$CACHE/stage
rm -rf "$STAGE"
mkdir -p "$STAGE/cni" "$BIN/cni"
LOG=$CACHE/build.log
: > "$LOG"
start=$(date +%s)
echo "build-node-runtime: building containerd, runc, the CNI plugins, CoreDNS and crictl (a few minutes the first time)"
build() {  # build MODULE CGO OUT LDFLAGS TAGS PACKAGE...
  local mod=$1 cgo=$2 out=$3 ldflags=$4 tags=$5
  shift 5
  (cd "$MODS/$mod" && CGO_ENABLED=$cgo GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
     "$GO" build -trimpath -buildvcs=false -tags "$tags" -ldflags "-s -w $ldflags" -o "$out" "$@") >>"$LOG" 2>&1 \
    || { tail -30 "$LOG" >&2; echo "build-node-runtime: building $mod failed (log: $LOG)" >&2; exit 1; }
}
CTRD=$(version_of containerd github.com/containerd/containerd/v2)
CRICTL=$(version_of crictl sigs.k8s.io/cri-tools)
build containerd 0 "$STAGE/" "-X github.com/containerd/containerd/v2/version.Version=$CTRD" "no_btrfs no_devmapper no_zfs" \
  github.com/containerd/containerd/v2/cmd/containerd \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  github.com/containerd/containerd/v2/cmd/ctr
build runc 1 "$STAGE/runc" "" "seccomp" github.com/opencontainers/runc
build cni 0 "$STAGE/cni/" "" "" \
  github.com/containernetworking/plugins/plugins/main/bridge \
  github.com/containernetworking/plugins/plugins/ipam/host-local \
  github.com/containernetworking/plugins/plugins/main/loopback \
  github.com/containernetworking/plugins/plugins/meta/portmap
build coredns 0 "$STAGE/coredns" "" "" github.com/coredns/coredns
build crictl 0 "$STAGE/crictl" "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL" "" \
  sigs.k8s.io/cri-tools/cmd/crictl

# The sandbox image: the pause program of the Kubernetes release the node runs.
KVER=$(cat "$KUBE_MOD/VERSION")
KDIR=$(cd "$KUBE_MOD" && GOFLAGS=-mod=readonly "$GO" mod download -json "k8s.io/kubernetes@v$KVER" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -f "$KDIR/build/pause/linux/pause.c" ] || { echo "build-node-runtime: pause.c not found in k8s.io/kubernetes@v$KVER" >&2; exit 1; }
PAUSE_TAG=$(sed -n 's/^TAG ?= *//p' "$KDIR/build/pause/Makefile")
gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_TAG-weft" -o "$STAGE/pause" "$KDIR/build/pause/linux/pause.c" >>"$LOG" 2>&1 \
  || { tail -10 "$LOG" >&2; echo "build-node-runtime: compiling pause.c failed (a static libc: libc6-dev)" >&2; exit 1; }
echo "registry.k8s.io/pause:$PAUSE_TAG" > "$STAGE/pause.ref"
STORE=$STAGE/buildah
B() { buildah --root "$STORE/storage" --runroot "$STORE/run" --storage-driver vfs "$@"; }
ctr=$(B from scratch)
B copy "$ctr" "$STAGE/pause" /pause >/dev/null
B config --entrypoint '["/pause"]' --user 65535:65535 "$ctr"
B commit -q "$ctr" "registry.k8s.io/pause:$PAUSE_TAG" >/dev/null
B push -q "registry.k8s.io/pause:$PAUSE_TAG" "oci-archive:$STAGE/pause.tar:registry.k8s.io/pause:$PAUSE_TAG"
B rm --all >/dev/null; B rmi --all >/dev/null 2>&1 || true

for p in $PROGRAMS pause.ref; do
  case $p in pause.ref) dst=$CACHE/$p ;; *) dst=$BIN/$p ;; esac
  cp "$STAGE/$p" "$dst.tmp" && mv "$dst.tmp" "$dst"
done
cp "$STAGE/pause.tar" "$CACHE/pause.tar.tmp" && mv "$CACHE/pause.tar.tmp" "$CACHE/pause.tar"
rm -rf "$STAGE"
echo "build-node-runtime: built in $(( $(date +%s) - start )) s into $CACHE" | tee -a "$LOG"
