#!/bin/bash
# Makes the Debian bookworm base image the image test builds on, since no
# registry can be pulled from: `mmdebstrap --variant=minbase` from the
# machine's configured Debian mirror into a tarball cached outside the source
# tree (like the kube binaries), for `podman import`.
#
# Usage: tests/images/base-image.sh [cache-dir]   (default ~/.cache/weft/debian-bookworm-minbase)
# Prints the tarball's path. Idempotent and safe to run concurrently (flock).
set -euo pipefail
CACHE=${1:-${WEFT_BASE_CACHE:-$HOME/.cache/weft/debian-bookworm-minbase}}
TAR=$CACHE/base.tar
[ -s "$TAR" ] && { echo "$TAR"; exit 0; }
command -v mmdebstrap >/dev/null || { echo "base-image: mmdebstrap not found; run scripts/install-deps.sh images" >&2; exit 1; }
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
[ -s "$TAR" ] && { echo "$TAR"; exit 0; }
MIRROR=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
[ -n "$MIRROR" ] || MIRROR=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if($i ~ /^https?:/){print $i; exit}}' /etc/apt/sources.list 2>/dev/null)
[ -n "$MIRROR" ] || { echo "base-image: no Debian mirror found in apt sources" >&2; exit 1; }
echo "base-image: mmdebstrap --variant=minbase bookworm from $MIRROR (a few minutes)" >&2
# A mirror answers a download with an error now and then (CI once lost the
# image test to one "apt download failed" 4 s in; the same command passed a
# minute later): three tries, 15 s and 60 s apart.
# mmdebstrap fails ("apt download failed") when it inherits open descriptors
# above 2, which ctest leaves open in its tests: run it with stdin, stdout and
# stderr only (the flock on fd 9 stays held by this shell).
mmdebstrap_clean_fds() (
  for fd in /proc/$BASHPID/fd/*; do
    fd=${fd##*/}
    [ "$fd" -gt 2 ] && eval "exec $fd>&-"
  done 2>/dev/null
  exec mmdebstrap "$@"
)
for wait_s in 15 60 fail; do
  mmdebstrap_clean_fds --quiet --variant=minbase bookworm "$CACHE/base.tmp.tar" "deb $MIRROR bookworm main" >&2 && break
  rm -f "$CACHE/base.tmp.tar"
  [ "$wait_s" = fail ] && exit 1
  echo "base-image: mmdebstrap failed; trying again in $wait_s s" >&2
  sleep "$wait_s"
done
mv "$CACHE/base.tmp.tar" "$TAR"
echo "$TAR"
