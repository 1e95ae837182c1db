#!/bin/bash
# Builds kube-apiserver, kube-controller-manager and kube-scheduler v1.20.2 from
# Debian bookworm's `kubernetes` source package, offline (the orig tarball
# vendors every Go dependency), into a cache outside the source tree.
#
# Usage: localcluster/build-kube-debian.sh [cache-dir] (build-kube.sh runs it for WEFT_KUBE_VERSION=1.20.2)   (default ~/.cache/weft/kube-v1.20.2)
# Result: <cache-dir>/bin/{kube-apiserver,kube-controller-manager,kube-scheduler}.
# Idempotent and safe to run concurrently: a lock serialises builders and the
# build is skipped when all three binaries exist. Needs golang-go (1.19), rsync
# and the apt client with the machine's configured Debian mirror.
set -euo pipefail
CACHE=${1:-${WEFT_KUBE_CACHE:-$HOME/.cache/weft/kube-v1.20.2}}
BIN=$CACHE/bin
K8S_VERSION=1.20.5+really1.20.2-1.1+deb12u1

have_all() {
  [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] && [ -x "$BIN/kube-scheduler" ]
}
have_all && { echo "build-kube: cached in $BIN"; exit 0; }

mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9
have_all && { echo "build-kube: cached in $BIN (built by a concurrent run)"; exit 0; }

for tool in go rsync apt-get dpkg patch make; do
  command -v "$tool" >/dev/null || { echo "build-kube: '$tool' not found; run scripts/install-deps.sh kube" >&2; exit 1; }
done

W=$CACHE/work
rm -rf "$W"
mkdir -p "$W/apt/lists/partial" "$W/apt/cache/archives/partial" "$W/src" "$BIN"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
# A private apt configuration with bookworm deb-src entries on the mirror this
# machine already uses, so the system's apt state is left untouched.
MIRROR=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
[ -n "$MIRROR" ] || MIRROR=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if($i ~ /^https?:/){print $i; exit}}' /etc/apt/sources.list 2>/dev/null)
[ -n "$MIRROR" ] || { echo "build-kube: no Debian mirror found in apt sources" >&2; exit 1; }
cat > "$W/apt/sources.list" <<SRC
deb-src [signed-by=$KEYRING] $MIRROR bookworm main
deb [signed-by=$KEYRING] $MIRROR bookworm main
SRC
cat > "$W/apt/apt.conf" <<CONF
Dir::Etc::sourcelist "$W/apt/sources.list";
Dir::Etc::sourceparts "/nonexistent";
Dir::State::Lists "$W/apt/lists";
Dir::Cache "$W/apt/cache";
Debug::NoLocking "true";
CONF
export APT_CONFIG=$W/apt/apt.conf
echo "build-kube: fetching kubernetes=$K8S_VERSION source from $MIRROR"
apt-get -q update >"$W/apt.log" 2>&1 || { cat "$W/apt.log" >&2; exit 1; }
cd "$W/src"
apt-get -q source --download-only "kubernetes=$K8S_VERSION" >>"$W/apt.log" 2>&1 || { cat "$W/apt.log" >&2; exit 1; }
apt-get -q download golang-github-modern-go-reflect2-dev >>"$W/apt.log" 2>&1 || { cat "$W/apt.log" >&2; exit 1; }
tar xzf kubernetes_1.20.5+really1.20.2.orig.tar.gz
dpkg -x golang-github-modern-go-reflect2-dev_*.deb r2
cd kubernetes-1.20.2
tar xJf ../kubernetes_1.20.5+really1.20.2-1.1+deb12u1.debian.tar.xz
while read -r p; do
  case "$p" in ''|\#*) continue ;; esac
  patch -p1 -s < "debian/patches/$p"
done < debian/patches/series
# The vendored reflect2 v1.0.1 breaks map iteration with Go >= 1.18; Debian's
# v1.0.2 is API-compatible, so swap it in and record the swap in modules.txt.
cp vendor/github.com/modern-go/reflect2/LICENSE ../reflect2.LICENSE
rm -rf vendor/github.com/modern-go/reflect2
cp -r ../r2/usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2
rm -f vendor/github.com/modern-go/reflect2/go.mod
cp ../reflect2.LICENSE vendor/github.com/modern-go/reflect2/LICENSE
sed -i "s#=> github.com/modern-go/reflect2 v1.0.1\$#=> github.com/modern-go/reflect2 v1.0.2#" vendor/modules.txt go.mod

echo "build-kube: compiling (several minutes on 2 cores)"
export CGO_ENABLED=0 GOPROXY=off GOFLAGS=-mod=vendor GO111MODULE=on
export GOCACHE=$CACHE/gocache GOPATH=$W/gopath
make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler" >"$W/make.log" 2>&1 \
  || { tail -40 "$W/make.log" >&2; exit 1; }
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  cp "_output/bin/$b" "$BIN/$b.tmp" && mv "$BIN/$b.tmp" "$BIN/$b"
done
cd "$CACHE" && rm -rf "$W" "$CACHE/gocache"
"$BIN/kube-apiserver" --version
