#!/usr/bin/env bash
# Builds weft for Hopper GPUs (sm_90) on this CPU machine and packs the
# binaries, with the shared libraries the GPU machine's image lacks, into
# .gpu/ at the project root (git-ignored through .git/info/exclude).
#
# The toolkit is the CUDA 13 wheels of the project's Python environment
# (scripts/python-env.sh; WEFT_CUDA_ROOT overrides): nvcc compiles here, and
# the CUDA runtime it compiled against (libcudart.so.13 of the same wheel)
# travels with the binaries. The GPU machine has a CUDA 13 driver, CMake and
# PyTorch with its own NCCL, cuBLAS and cuDNN wheels, but none of yaml-cpp,
# spdlog, prometheus-cpp, gloo, OpenBLAS, GTest and no package registry, so
# weft cannot be configured there. Build here, run there:
#   tests/gpu/bundle.sh                      # default targets, build dir build-gpu
#   tests/gpu/bundle.sh weft_gpu_tests       # just these targets
# then, on the GPU machine, from the project root (the .gpu folder copied along):
#   . .gpu/env.sh && .gpu/bin/weft_gpu_tests
# (name test binaries by path: GoogleTest death tests re-run argv[0] with execv,
# which does not search PATH)
# env.sh puts .gpu/bin first on PATH and sets LD_LIBRARY_PATH (bundled libs,
# then PyTorch's NCCL, cuBLAS and cuDNN wheels there).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
build=${WEFT_GPU_BUILD:-$root/build-gpu}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(weft_gpu_tests weft-worker weft-run weft-reference-dump)

cuda=${WEFT_CUDA_ROOT:-$("$root/scripts/python-env.sh" --cuda-root)}
py=$("$root/scripts/python-env.sh" --python)
[ -x "$cuda/bin/nvcc" ] || { echo "bundle: no nvcc under $cuda" >&2; exit 1; }
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DWEFT_CUDA_ROOT="$cuda" -DWEFT_CUDA_REQUIRED=ON -DWEFT_PYTHON="$py" >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

out=$root/.gpu
exclude=$(git -C "$root" rev-parse --git-path info/exclude)
case $exclude in /*) ;; *) exclude=$root/$exclude ;; esac
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >>"$exclude"
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"

# Present on the GPU machine (glibc, the C++ runtime, zlib, the driver, and
# PyTorch's NCCL and cuBLAS wheels): not packed. The CUDA runtime is packed:
# the binaries were compiled against this wheel's, which may be newer than the
# one PyTorch brings there (a CUDA 13 driver runs any 13.x runtime).
base='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libz|libcuda|libnccl|libcublas)\.'
for t in "${targets[@]}"; do
  bin=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  [ -n "$bin" ] || { echo "bundle: no binary for target $t under $build" >&2; exit 1; }
  strip -o "$out/bin/$t" "$bin"
  # NCCL resolves from the wheels here and from PyTorch's there.
  LD_LIBRARY_PATH=$cuda/lib:$cuda/../nccl/lib ldd "$bin" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $base ]] || cp -Ln "$path" "$out/lib/$name"
  done
done

cat >"$out/env.sh" <<'ENV'
# Source on the GPU machine from the project root: . .gpu/env.sh
_gpu=$(cd "$(dirname "${BASH_SOURCE[0]:-.gpu/env.sh}")" && pwd)
_wheels=$(python3 -c 'import nvidia, os; p = list(nvidia.__path__)[0]; print(":".join(os.path.join(p, d) for d in ("nccl/lib", "cu13/lib", "cublas/lib", "cudnn/lib") if os.path.isdir(os.path.join(p, d))))' 2>/dev/null || true)
export LD_LIBRARY_PATH=$_gpu/lib${_wheels:+:$_wheels}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$_gpu/bin:/usr/local/cuda/bin:$PATH
ENV
# Provenance: what was built, from which commit, with which tools and wheels
# (the GPU machine adds its own GPU, driver, NCCL and cuDNN versions at run time).
commit=$(git -C "$root" rev-parse HEAD)
dirty=false; [ -z "$(git -C "$root" status --porcelain --untracked-files=no)" ] || dirty=true
nvcc_v=$("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p' | head -1)
cxx_v=$(c++ --version 2>/dev/null | head -1)
"$py" - "$out/build-info.json" "$commit" "$dirty" "${nvcc_v:-unknown}" "$cxx_v" "${targets[*]}" "$cuda" <<'PY'
import json, sys, datetime
from importlib import metadata
path, commit, dirty, nvcc, cxx, targets, cuda = sys.argv[1:]
wheels = {}
for name in ("cuda-toolkit", "nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-crt",
             "nvidia-cuda-cccl", "nvidia-cublas", "nvidia-nccl-cu13", "nvidia-cudnn-cu13", "torch"):
    try:
        wheels[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        wheels[name] = None
json.dump({"commit": commit, "dirty": dirty == "true", "nvcc": nvcc, "cxx": cxx,
           "cuda_root": cuda, "wheels": wheels,
           "cuda_archs": "90", "targets": targets.split(),
           "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")},
          open(path, "w"), indent=1)
PY
size=$(du -sb "$out" | cut -f1)
echo "bundle: $out ready (${targets[*]}), $((size / 1048576)) MiB, commit ${commit:0:12}$($dirty && echo ' (dirty)')"
# Everything that travels to the GPU machine (tracked files + carried paths) must stay under 64 MiB.
[ "$size" -lt $((48 * 1048576)) ] || echo "bundle: warning: .gpu is $((size / 1048576)) MiB; with the tracked files it may pass the 64 MiB a call can carry" >&2
