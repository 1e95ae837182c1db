#!/bin/bash
# The container images, built and run for real without a Docker daemon:
# Debian's buildah builds the Dockerfile (--isolation chroot) on a Debian
# bookworm base made here by mmdebstrap (base-image.sh, cached), since no
# registry can be pulled from. Then, inside the images (buildah run; podman
# run needs cgroups these machines lack):
#   worker:   weft-worker --help; a 20-step, 2-rank tiny training run with
#             weft-run whose summary.json shows 20 steps and a falling loss
#   operator: weft-operator --help
#   both:     ENTRYPOINT is what the operator's pods / the chart's Deployment
#             run, user 65532, OCI labels, no compiler or header inside
# and reports each image's size and layer count, then writes both as OCI
# archives (WORK_DIR/weft-operator.tar, weft-worker-cpu.tar) named as the chart
# and the examples name them, for the local cluster's real nodes. CUDA is off.
# Usage: image_test.sh SOURCE_DIR WORK_DIR   (WORK_DIR: build logs)
# buildah's storage lives in ~/.cache/weft/images-store (WEFT_IMAGES_STORE)
# and keeps two images between runs: the Debian base and the build stage's
# dependencies (Dockerfile target `deps`, tagged by the hash of
# scripts/install-deps.sh), which the build then uses as its base, so
# install-deps.sh finds every package present. The worker build reuses the
# operator build's build stage (--layers); everything else built here is
# removed at the end (WEFT_IMAGES_KEEP=1 keeps the two images).
set -uo pipefail
SRC=$(cd "$1" && pwd) WORK=$2
T0=$(date +%s)
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }
[ "$(id -u)" = 0 ] || skip "buildah --isolation chroot needs root here"
for t in buildah podman mmdebstrap; do
  command -v $t >/dev/null || skip "$t not found: scripts/install-deps.sh images"
done
mkdir -p "$WORK"
export BUILDAH_ISOLATION=chroot
STORE_DIR=${WEFT_IMAGES_STORE:-$HOME/.cache/weft/images-store}
STORE=(--root "$STORE_DIR/storage" --runroot "$STORE_DIR/run" --storage-driver overlay)
B() { buildah "${STORE[@]}" "$@"; }
# buildah run CTR -- CMD... for a command that always prints something. Under
# load `buildah run --isolation chroot` has returned 0 with nothing on stdout
# (twice in CI: `id -u` and `cat summary.json`, both fine when rerun); such a
# run is tried again, at most 3 times, and said so on stderr.
run_out() {
  local ctr=$1 out try
  shift
  for try in 1 2 3; do
    out=$(B run "$ctr" -- "$@" 2>&1) || { echo "$out"; return 1; }
    [ -n "$out" ] && { echo "$out"; return 0; }
    echo "image test: buildah run $* printed nothing (try $try of 3)" >&2
  done
  return 0
}
# One image test at a time per store: the cleanup prunes unnamed images.
mkdir -p "$STORE_DIR"
exec 8>"$STORE_DIR/.lock"
flock 8
OPERATOR=localhost/weft-operator:test-$$ WORKER=localhost/weft-worker:test-cpu-$$
CTRS=()
cleanup() {
  for c in "${CTRS[@]}"; do B rm "$c" >/dev/null 2>&1; done
  [ -n "${WEFT_IMAGES_KEEP:-}" ] && { echo "kept $OPERATOR $WORKER (WEFT_IMAGES_KEEP)"; return; }
  B rmi "$OPERATOR" "$WORKER" >/dev/null 2>&1
  # Build containers left by an interrupted build, then the unnamed stages.
  B rm --all >/dev/null 2>&1
  for _ in 1 2 3; do B rmi --prune >/dev/null 2>&1 || break; done
}
trap cleanup EXIT

TAR=$("$SRC/tests/images/base-image.sh") || fail "could not make the Debian base tarball"
BASE=localhost/debian:bookworm
if ! B inspect --type image "$BASE" >/dev/null 2>&1; then
  podman "${STORE[@]}" import "$TAR" "$BASE" >/dev/null || fail "podman import $TAR"
fi
echo "base image $BASE from $TAR ($(( $(date +%s) - T0 )) s)"

# The build stage compiles through this machine's own ccache (mounted, the
# Dockerfile's CCACHE_DIR): the test build before this test compiled the
# same CPU sources, so the programs build from the Dockerfile, from source,
# without compiling them a second time. Without ccache here the stage's own
# cache mount serves, as for any builder.
CCACHE_ARGS=()
if command -v ccache >/dev/null; then
  HOST_CCACHE=$(ccache --get-config cache_dir 2>/dev/null)
  if [ -n "$HOST_CCACHE" ]; then
    mkdir -p "$HOST_CCACHE"
    CCACHE_ARGS=(--volume "$HOST_CCACHE:/ccache-host" --build-arg CCACHE_DIR=/ccache-host)
  fi
fi

build() {  # build TARGET TAG [build-arg...]
  local target=$1 tag=$2 t=$(date +%s); shift 2
  B build --layers --target "$target" -t "$tag" --build-arg JOBS="$(nproc)" --build-arg REVISION=test "$@" \
    -f "$SRC/Dockerfile" "$SRC" >"$WORK/build-$target.log" 2>&1 \
    || { tail -40 "$WORK/build-$target.log" >&2; fail "buildah build --target $target (log: $WORK/build-$target.log)"; }
  echo "built $tag in $(( $(date +%s) - t )) s"
}
DEPS=localhost/weft-build-deps:$(sha256sum "$SRC/scripts/install-deps.sh" | cut -c1-12)
if ! B inspect --type image "$DEPS" >/dev/null 2>&1; then
  for old in $(B images --format '{{.Name}}:{{.Tag}}' | grep '^localhost/weft-build-deps:'); do B rmi "$old" >/dev/null 2>&1; done
  build deps "$DEPS" --build-arg BUILD_BASE=$BASE
fi
build operator "$OPERATOR" --build-arg BUILD_BASE="$DEPS" --build-arg OPERATOR_BASE=$BASE "${CCACHE_ARGS[@]}"
build worker "$WORKER" --build-arg BUILD_BASE="$DEPS" --build-arg WORKER_BASE=$BASE "${CCACHE_ARGS[@]}"
# How much of the from-source build the cache served (reported, not asserted).
grep -E '^ccache: +(Hits|Misses):' "$WORK/build-operator.log" | head -2 | sed 's/^ccache: */build stage compilations, ccache /'
grep -q "install-deps: all .* packages present" "$WORK/build-operator.log" \
  || fail "the build stage did not run scripts/install-deps.sh on the cached dependencies"
grep -q "stage-runtime: every library of /usr/local/bin/weft-worker /usr/local/bin/weft-run resolves" \
  "$WORK/build-worker.log" || fail "the worker stage's ldd check did not run"

# What the operator and the chart run must be each image's ENTRYPOINT.
WORKER_CMD=$(sed -n 's/.*kWorkerBinary = "\([^"]*\)".*/\1/p' "$SRC/operator/trainingjob/constants.h")
OPERATOR_CMD=$(sed -n 's/^ *command: \[\([^]]*\)\].*/\1/p' "$SRC/charts/weft/templates/deployment.yaml")
[ -n "$WORKER_CMD" ] && [ -n "$OPERATOR_CMD" ] || fail "cannot read the pod commands from the sources"

check_image() {  # check_image TAG ENTRYPOINT PROGRAM...
  local tag=$1 entry=$2 c cfg size layers; shift 2
  cfg=$(B inspect --type image "$tag") || fail "inspect $tag"
  python3 - "$entry" "$cfg" <<'PY' || fail "$tag: image config"
import json, sys
want, cfg = sys.argv[1], json.loads(sys.argv[2])["OCIv1"]["config"]
assert cfg.get("Entrypoint") == [want], f"Entrypoint {cfg.get('Entrypoint')} != [{want!r}]"
assert cfg.get("User") == "65532:65532", f"User {cfg.get('User')!r}"
labels = cfg.get("Labels") or {}
for k in ("title", "source", "version", "revision"):
    assert labels.get("org.opencontainers.image." + k), f"label org.opencontainers.image.{k} missing"
PY
  c=$(B from --pull=never "$tag") || fail "buildah from $tag"
  CTRS+=("$c")
  uid=$(run_out "$c" id -u) || fail "$tag: buildah run id -u failed: $uid"
  [ "$uid" = 65532 ] || fail "$tag does not run as uid 65532: id -u printed '$uid'"
  # No toolchain and no development headers (where -dev packages put them)
  # in a runtime image.
  out=$(B run "$c" -- sh -c 'for t in cc gcc g++ c++ clang ld as make cmake nvcc; do command -v $t; done;
        find /usr/include /usr/local \( -name "*.h" -o -name "*.hpp" \) -print 2>/dev/null | head -3')
  [ -z "$out" ] || fail "$tag contains build tools or headers: $out"
  for p in "$@"; do
    out=$(run_out "$c" "$p" --help) || fail "$tag: $p --help: $out"
    grep -q "Usage:" <<<"$out" || fail "$tag: $p --help prints no usage: $out"
  done
  size=$(B images --format '{{.Size}}' "$tag" | head -1)
  layers=$(python3 -c 'import json, sys; print(len(json.loads(sys.argv[1])["OCIv1"]["rootfs"]["diff_ids"]))' "$cfg")
  echo "image $tag: $size, $layers layers, ENTRYPOINT [$entry], user 65532"
  LAST_CTR=$c
}
check_image "$OPERATOR" "$OPERATOR_CMD" weft-operator
check_image "$WORKER" "$WORKER_CMD" weft-worker weft-run
worker=$LAST_CTR

# A tiny training run inside the worker image: two ranks over loopback. The
# chroot shares the host's network, so the metrics ports (9400+) stay off.
out=$(B run "$worker" -- env WEFT_METRICS_PORT=0 weft-run -n 2 -- --steps 20 --out /tmp/run --no-resume 2>&1) \
  || fail "training in the worker image: $out"
summary=$(run_out "$worker" cat /tmp/run/summary.json) || fail "no summary.json: $out"
python3 - "$summary" <<'PY' || fail "training summary"
import json, math, sys
s = json.loads(sys.argv[1])
assert s["steps_done"] == 20 and s["world_size"] == 2, (s["steps_done"], s["world_size"])
losses = s["losses"]
assert len(losses) == 20 and all(math.isfinite(l) for l in losses), losses
assert losses[-1] < losses[0], f"loss did not fall: {losses[0]} -> {losses[-1]}"
print(f"trained 20 steps on 2 ranks in the worker image: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
PY
# The images as OCI archives under the names the chart and the example
# manifests give them: what the local cluster's real nodes import
# (localcluster/cluster.sh; no registry can be pulled from here).
VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$SRC/charts/weft/Chart.yaml")
REPO=$(sed -n 's/^  repository: *\([^ ]*\)\/weft-operator.*/\1/p' "$SRC/charts/weft/values.yaml")
[ -n "$VERSION" ] && [ -n "$REPO" ] || fail "cannot read the image names from charts/weft"
export_image() {  # export_image TAG FILE NAME
  B push -q "$1" "oci-archive:$WORK/$2.tmp:$3" || fail "exporting $1 to $WORK/$2"
  mv "$WORK/$2.tmp" "$WORK/$2"
  echo "exported $3 to $WORK/$2 ($(du -m "$WORK/$2" | cut -f1) MB)"
}
export_image "$OPERATOR" weft-operator.tar "$REPO/weft-operator:$VERSION"
export_image "$WORKER" weft-worker-cpu.tar "$REPO/weft-worker:$VERSION-cpu"
echo "PASS: images built and run in $(( $(date +%s) - T0 )) s"
