#!/bin/bash
# Runs the Kubernetes test suite, ctest labels kube, operator-kube and
# node-kube (the control plane fixture, the operator's integration tests, the
# node agent's, kubectl/helm/CEL checks), against one of the Kubernetes
# releases localcluster/ pins (kube-bin.sh), building that release first
# when it is not cached (build-kube.sh, niced: ~15-25 min of 2 cores the
# first time) and the test programs those labels run when they are stale or
# missing (cmake --build of the configured build tree, niced).
#
# Usage: localcluster/test-kube-version.sh VERSION [BUILD_DIR] [ctest args...]
#   VERSION    current, oldest or a pinned release (1.37.2, 1.35.4)
#   BUILD_DIR  a configured build tree (default: build/ of the source tree)
#   further arguments go to ctest (e.g. --repeat until-pass:2)
# Env: WEFT_TEST_JOBS (ctest and cmake -j, default 2).
# Prints ctest's output and, last, one line: release, passed/total, wall
# seconds, date and commit. Exit status: ctest's.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/.." && pwd)
[ $# -ge 1 ] || { sed -n '10,16p' "$0" >&2; exit 2; }
export WEFT_KUBE_VERSION=$1
shift
BUILD=$SRC/build
if [ $# -ge 1 ] && [ "${1#-}" = "$1" ]; then BUILD=$1; shift; fi
BUILD=$(cd "$BUILD" && pwd)
[ -f "$BUILD/CTestTestfile.cmake" ] || { echo "test-kube-version: $BUILD is no configured build tree" >&2; exit 2; }
JOBS=${WEFT_TEST_JOBS:-2}
LABELS='^(kube|operator-kube|node-kube)$'

# shellcheck source=kube-bin.sh
. "$HERE/kube-bin.sh"   # resolves WEFT_KUBE_VERSION (refuses an unpinned one)
nice -n 10 "$HERE/build-kube.sh"

# The programs the labelled tests run from the build tree (its targets:
# cmake builds what they depend on, weft-operator and weft-node included).
targets=$(ctest --test-dir "$BUILD" -L "$LABELS" --show-only=json-v1 | /usr/bin/python3 -c '
import json, os, sys
build = sys.argv[1] + os.sep
print(" ".join(sorted({os.path.basename(t["command"][0]) for t in json.load(sys.stdin)["tests"]
                       if t.get("command") and t["command"][0].startswith(build)})))' "$BUILD")
if [ -n "$targets" ]; then
  # shellcheck disable=SC2086
  nice -n 10 cmake --build "$BUILD" -j "$JOBS" --target $targets
fi

commit=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$SRC" status --porcelain --untracked-files=no 2>/dev/null | head -1)
echo "test-kube-version: Kubernetes v$WEFT_KUBE_VERSION ($("$WEFT_KUBE_BIN/kube-apiserver" --version)), commit $commit${dirty:+ with local changes}, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
set +e
ctest --test-dir "$BUILD" -L "$LABELS" -j "$JOBS" --output-on-failure "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
wall=$(( $(date +%s) - start ))
summary=$(grep -E '^[0-9]+% tests passed' "$log" | tail -1)
echo "test-kube-version: v$WEFT_KUBE_VERSION: ${summary:-no ctest summary}; ${wall} s wall; $(date -u +%Y-%m-%d); commit $commit${dirty:+ with local changes}"
exit "$rc"
