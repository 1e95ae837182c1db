#!/usr/bin/env bash
# Before a GPU run, on this (CPU) machine: builds the sm_90 bundle into .gpu/
# (tests/gpu/bundle.sh, with the CUDA 13 wheels of scripts/python-env.sh:
# binaries, the libraries the GPU machine lacks, env.sh, build-info.json with
# the commit and the wheels' versions), adds the NCCL and cuDNN versions it
# was built against to build-info.json, and measures what the
# run takes along: the tracked and untracked-not-ignored files plus .gpu must
# stay under 64 MiB. Prints the commands to run on the GPU machine.
#   tests/gpu/prepare.sh            # exit 1 when that is too large or the tree is dirty
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
"$root/tests/gpu/bundle.sh" weft_gpu_tests weft-worker weft-run weft-reference-dump
# The versions built against, from the wheels' own headers (the wheel
# versions are in build-info.json's "wheels").
header_version() {  # header_version FILE MACRO...: "a.b.c" from #defines
  local f=$1; shift
  [ -f "$f" ] || return 0
  local out=() m v
  for m in "$@"; do
    v=$(sed -n "s/^#define $m[[:space:]]\+\([0-9]\+\).*/\1/p" "$f" | head -1)
    out+=("${v:-?}")
  done
  (IFS=.; echo "${out[*]}")
}
cuda=$(python3 -c 'import json; print(json.load(open(".gpu/build-info.json"))["cuda_root"])')
python3 - .gpu/build-info.json "$(header_version "$cuda/../nccl/include/nccl.h" NCCL_MAJOR NCCL_MINOR NCCL_PATCH)" \
  "$(header_version "$cuda/../cudnn/include/cudnn_version.h" CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL)" <<'PY'
import json, sys
path, nccl, cudnn = sys.argv[1:]
info = json.load(open(path))
info.update(built_against={"nccl": nccl or None, "cudnn_headers": cudnn or None, "cuda": info.get("nvcc")})
json.dump(info, open(path, "w"), indent=1)
PY
# Libraries over 1 MiB travel xz-compressed (Debian's OpenBLAS is 35 MiB, 4
# packed); tests/gpu/gpu_run.py unpacks them on the GPU machine before its preflight.
python3 - .gpu/lib <<'PY'
import glob, lzma, os, shutil, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*"))):
    if path.endswith(".xz") or os.path.getsize(path) < (1 << 20):
        continue
    with open(path, "rb") as src, lzma.open(path + ".xz", "wb", preset=6) as dst:
        shutil.copyfileobj(src, dst)
    print(f"prepare: packed {os.path.basename(path)}: {os.path.getsize(path) >> 20} -> {os.path.getsize(path + '.xz') >> 20} MiB")
    os.remove(path)
PY
# What travels: git's view of the tree (tracked + untracked, not ignored) and .gpu.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)
gpu=$(du -sb .gpu | cut -f1)
total=$((tree + gpu))
echo "prepare: the GPU run takes along $((total / 1048576)) MiB (tree $((tree / 1048576)) MiB, .gpu $((gpu / 1048576)) MiB) of 64"
dirty=$(python3 -c 'import json; print(json.load(open(".gpu/build-info.json"))["dirty"])')
status=0
if [ "$total" -ge $((64 * 1048576)) ]; then echo "prepare: over the 64 MiB that may travel to the GPU machine" >&2; status=1; fi
if [ "$dirty" = True ]; then echo "prepare: the tree is dirty: commit first, so the records name what ran" >&2; status=1; fi
cat <<CALL
prepare: then, on the GPU machine (.gpu/ copied along, a 580 s limit):
  bash tests/gpu/gpu_checks.sh --budget 540
and, if the machine is still up and time remains (a limit of what is left, less 40 s):
  bash tests/gpu/gpu_checks.sh --set second --budget <that, less 40>
CALL
exit $status
