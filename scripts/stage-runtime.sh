#!/bin/sh
# Stages programs and exactly the shared libraries they load into a directory
# tree for a runtime image: DEST/usr/local/bin/<program> (debug info stripped)
# and DEST/usr/local/lib/<soname> for every library ldd resolves, except the
# C library family and the toolchain runtime (libstdc++, libgcc_s), which the
# runtime base provides; the runtime stage checks the result with
# `stage-runtime.sh --check`. A library ldd cannot resolve fails the build.
# Usage: stage-runtime.sh DEST PROGRAM...    stage-runtime.sh --check PROGRAM...
set -eu
base_lib() {  # libraries every Debian/Ubuntu base image has (libc6, libgcc-s1, libstdc++6)
  case "$1" in
    linux-vdso.so.*|ld-linux*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*) return 0 ;;
    libstdc++.so.*|libgcc_s.so.*) return 0 ;;
    libcuda.so.*|libnvidia-*) return 0 ;;  # the driver: mounted by the NVIDIA container toolkit
  esac
  return 1
}
if [ "$1" = --check ]; then
  shift
  missing=$(ldd "$@" | grep "not found" || true)
  [ -z "$missing" ] || { echo "stage-runtime: unresolved libraries:" >&2; echo "$missing" >&2; exit 1; }
  echo "stage-runtime: every library of $* resolves"
  exit 0
fi
DEST=$1; shift
mkdir -p "$DEST/usr/local/bin" "$DEST/usr/local/lib"
for prog in "$@"; do
  out=$(ldd "$prog")
  if echo "$out" | grep -q "not found"; then echo "stage-runtime: $prog: $out" >&2; exit 1; fi
  echo "$out" | while read -r soname arrow path _; do
    [ "$arrow" = "=>" ] || continue
    base_lib "$soname" && continue
    [ -e "$DEST/usr/local/lib/$soname" ] || cp -L "$path" "$DEST/usr/local/lib/$soname"
  done
  cp "$prog" "$DEST/usr/local/bin/"
  strip --strip-debug "$DEST/usr/local/bin/$(basename "$prog")"
done
strip --strip-unneeded "$DEST"/usr/local/lib/*.so* 2>/dev/null || true
echo "stage-runtime: $DEST: $(ls "$DEST/usr/local/bin" | tr '\n' ' ')+ $(ls "$DEST/usr/local/lib" | wc -l) libraries"
ls "$DEST/usr/local/lib"
