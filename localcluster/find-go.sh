#!/usr/bin/env bash
# Prints the path of a Go command new enough for every GO.MOD given (their
# `go` lines; all of localcluster's go.mod files when none is given), for the
# scripts that build the local cluster's programs from the Go module proxy
# (build-kube.sh, build-node-runtime.sh, kueue.sh, coscheduling.sh).
#
# Looked for in order: $GO, `go` on PATH, /usr/local/go/bin/go, the toolchain
# this script unpacked before (~/.cache/weft/go-<PIN>); else that toolchain is
# fetched: Go publishes each release on the module proxy as the module
# golang.org/toolchain (what GOTOOLCHAIN=go1.X.Y switches to), so a machine
# with the proxy but no new enough Go (Debian bookworm's golang-go is 1.19;
# a CI machine's PATH may lack /usr/local/go/bin) still builds. The zip is
# checked against the sha256 pinned below before it is unpacked.
#
# Usage: localcluster/find-go.sh [GO.MOD...]
# Env: GO (a Go command to use; refused when too old), GOPROXY (the first
# https entry is used, default https://proxy.golang.org), WEFT_GO_CACHE (where
# the toolchain goes, default ~/.cache/weft/go-<PIN>).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)

PIN=1.26.8
declare -A SHA256=(
  [amd64]=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7
  [arm64]=02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99
)

mods=("$@")
[ ${#mods[@]} -gt 0 ] || mapfile -t mods < <(find "$HERE" -name go.mod -not -path '*/testdata/*' | sort)
want=0
for m in "${mods[@]}"; do
  [ -f "$m" ] || { echo "find-go: no $m" >&2; exit 2; }
  v=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$m" | head -1)
  [ -n "$v" ] && want=$(printf '%s\n%s\n' "$want" "$v" | sort -V | tail -1)
done

new_enough() {  # new_enough GO: its version is at least $want
  local have
  have=$("$1" env GOVERSION 2>/dev/null | sed -n 's/^go\([0-9.]*\).*/\1/p') || return 1
  [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)" = "$want" ]
}

if [ -n "${GO:-}" ]; then
  new_enough "$GO" || { echo "find-go: GO=$GO is not Go >= $want" >&2; exit 1; }
  command -v "$GO"
  exit 0
fi
CACHE=${WEFT_GO_CACHE:-$HOME/.cache/weft/go-$PIN}
for g in go /usr/local/go/bin/go "$CACHE/bin/go"; do
  if command -v "$g" >/dev/null 2>&1 && new_enough "$g"; then command -v "$g"; exit 0; fi
done
if [ "$(printf '%s\n%s\n' "$want" "$PIN" | sort -V | head -1)" != "$want" ]; then
  echo "find-go: a go.mod wants Go $want, newer than the toolchain pinned here ($PIN): raise PIN and its sha256 in $0" >&2
  exit 1
fi

case $(uname -m) in
  x86_64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "find-go: no Go >= $want found and no pinned toolchain for $(uname -m) (set GO=...)" >&2; exit 1 ;;
esac
proxy=https://proxy.golang.org
IFS=',|' read -ra entries <<<"${GOPROXY:-}"
for e in "${entries[@]}"; do case $e in https://*) proxy=${e%/}; break ;; esac; done
version=v0.0.1-go$PIN.linux-$arch
url=$proxy/golang.org/toolchain/@v/$version.zip

mkdir -p "$(dirname "$CACHE")"
exec 9>"$CACHE.lock"
flock 9
if [ -x "$CACHE/bin/go" ] && new_enough "$CACHE/bin/go"; then echo "$CACHE/bin/go"; exit 0; fi
tmp=$(mktemp -d "$CACHE.tmp-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "find-go: no Go >= $want on this machine; fetching Go $PIN ($url)" >&2
curl -sSfL --retry 3 -o "$tmp/go.zip" "$url" || { echo "find-go: fetching $url failed (set GO=... or GOPROXY)" >&2; exit 1; }
got=$(sha256sum "$tmp/go.zip" | cut -d' ' -f1)
[ "$got" = "${SHA256[$arch]}" ] || { echo "find-go: $url has sha256 $got, not the pinned ${SHA256[$arch]}" >&2; exit 1; }
unzip -q "$tmp/go.zip" -d "$tmp/x"
root=$tmp/x/golang.org/toolchain@$version
# Module zips keep no file modes: the commands are made executable again, as
# Go's own toolchain switch does.
chmod +x "$root"/bin/* "$root"/pkg/tool/*/*
rm -rf "$CACHE"
mv "$root" "$CACHE"
new_enough "$CACHE/bin/go" || { echo "find-go: the unpacked $CACHE/bin/go does not run" >&2; exit 1; }
echo "find-go: Go $PIN in $CACHE" >&2
echo "$CACHE/bin/go"
