#!/usr/bin/env bash
# Every GPU check of docs/cuda.md in one run, for the GPU machine (weft built
# for sm_90 in build-gpu/, or its binaries with their libraries in .gpu/,
# run from the project root):
#   bash tests/gpu/gpu_checks.sh [LOG_DIR]      (default: $OUT, else gpu-logs)
# Writes one log per check plus summary.txt (PASS/FAIL per check) into
# LOG_DIR and exits non-zero if any check failed. Checks keep going after a
# failure: device time is rare, and one run should say everything.
# WEFT_GPU_CHECKS picks checks by name (default: all but speed and profile):
#   gpu_tests multirank memcheck racecheck synccheck memcheck_cudnn hf_transformers gpt2_124m speed profile
# multirank is every parallel strategy on several ranks of this GPU against one
# rank (tests/gpu/multirank_check.py: host-staged Gloo, checkpoints across
# devices, transformers); WEFT_MULTIRANK_ARGS passes it options.
# speed is the GPU speed harness (tests/bench/gpu/speed.py), which also trains
# gpt2-124m on the GPU; WEFT_SPEED_ARGS passes it options (--deadline ...).
# profile is a whole-step kernel profile of gpt2-124m
# (tests/bench/gpu/step_profile.py; WEFT_PROFILE_ARGS, e.g. "--mb 16").
# WEFT_CHECK_LIMITS="name=seconds ..." overrides a check's time limit, and
# WEFT_GPU_TESTS_FILTER the gtest filter of gpu_tests (device time is scarce).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
logs=${1:-${OUT:-gpu-logs}}
mkdir -p "$logs"
# shellcheck disable=SC1091
[ -f .gpu/env.sh ] && . .gpu/env.sh
bin=$root/.gpu/bin
[ -x "$bin/weft_gpu_tests" ] || bin=$root/build-gpu/bin
sanitizer=${WEFT_COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
checks=" ${WEFT_GPU_CHECKS:-gpu_tests multirank memcheck racecheck synccheck memcheck_cudnn hf_transformers gpt2_124m} "
want() { [[ $checks == *" $1 "* ]]; }
# cuDNN: the CUDA toolkit's, else the one in PyTorch's nvidia-cudnn wheel.
cudnn_lib=$(python3 -c 'import nvidia.cudnn, os; print(list(nvidia.cudnn.__path__)[0] + "/lib")' 2>/dev/null || true)
[ -n "$cudnn_lib" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$cudnn_lib
summary=$logs/summary.txt
: >"$summary"
failed=0

check() {  # check NAME TIMEOUT_S CMD...
  local name=$1 limit=$2 kv
  shift 2
  want "$name" || return 0
  for kv in ${WEFT_CHECK_LIMITS:-}; do [ "${kv%%=*}" = "$name" ] && limit=${kv#*=}; done
  local t0=$SECONDS
  if timeout "$limit" "$@" >"$logs/$name.log" 2>&1; then
    echo "PASS $name ($((SECONDS - t0)) s)" | tee -a "$summary"
  else
    echo "FAIL $name (exit $?, $((SECONDS - t0)) s): see $name.log" | tee -a "$summary"
    tail -20 "$logs/$name.log"
    failed=1
  fi
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version 2>/dev/null | tail -2
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "transformers", transformers.__version__)'
  echo "cudnn libraries: ${cudnn_lib:-none}"; ls "${cudnn_lib:-/nonexistent}" 2>/dev/null | tr '\n' ' '; echo
} >"$logs/versions.txt" 2>&1
cat "$logs/versions.txt"

# 1. Every GPU test (op tests, allocator, NCCL, training); none may skip.
check gpu_tests 300 "$bin/weft_gpu_tests" --gtest_brief=0 --gtest_filter="${WEFT_GPU_TESTS_FILTER:-*}"
if want gpu_tests && grep -q "SKIPPED" "$logs/gpu_tests.log"; then
  echo "FAIL gpu_tests_none_skipped: $(grep -c '\[  SKIPPED' "$logs/gpu_tests.log") skipped" | tee -a "$summary"
  failed=1
fi
# 1b. Every strategy on several ranks of this one GPU (host-staged collectives).
# shellcheck disable=SC2086
check multirank 300 python3 tests/gpu/multirank_check.py --bin "$bin" --out "$logs" ${WEFT_MULTIRANK_ARGS:-}
# 2. Sanitizers over the op tests.
check memcheck 300 "$sanitizer" --tool memcheck --error-exitcode 1 "$bin/weft_gpu_tests" \
  --gtest_filter='CudaOps.*:CudaAllocator.*'
check racecheck 300 "$sanitizer" --tool racecheck --error-exitcode 1 "$bin/weft_gpu_tests" \
  --gtest_filter='CudaOps.Attention*:CudaOps.RmsNorm:CudaOps.CrossEntropy'
check synccheck 300 "$sanitizer" --tool synccheck --error-exitcode 1 "$bin/weft_gpu_tests" --gtest_filter='CudaOps.*'
# cuDNN's attention under memcheck (its own check: loading cuDNN's engines
# under the sanitizer is slow).
check memcheck_cudnn 300 "$sanitizer" --tool memcheck --error-exitcode 1 "$bin/weft_gpu_tests" \
  --gtest_filter='CudnnAttention.MatchesTheCpuOpAndTheSimtKernels'
# 3. A GPU run's checkpoint in transformers (and transformers' models in weft).
check hf_transformers 300 python3 tests/reference/hf_transformers_check.py --bin "$bin" \
  --workdir "$logs/hf-work" --device cuda --weft-device cuda
rm -rf "$logs/hf-work"
# 4. The gpt2-124m preset on the GPU: a few steps for loss and throughput.
cat >"$logs/gpt2.yaml" <<'YAML'
preset: gpt2-124m
device: cuda
train: {steps: 30, micro_batch: 4, grad_accum: 1, log_every: 5, out_dir: /tmp/weft-gpu-gpt2}
metrics: {port: 0, peak_tflops: 989}
YAML
check gpt2_124m 300 "$bin/weft-worker" "$logs/gpt2.yaml"
want gpt2_124m && grep -E "step|tok/s|device" "$logs/gpt2_124m.log" | tail -8
# 5. The speed harness: weft against PyTorch eager and torch.compile.
# shellcheck disable=SC2086
check speed 900 python3 tests/bench/gpu/speed.py --bin "$bin" --out "$logs" --build-info "$root/.gpu/build-info.json" \
  ${WEFT_SPEED_ARGS:-}

# 6. Where a step's GPU time goes (Nsight Systems if installed, else Compute).
# shellcheck disable=SC2086
check profile 300 python3 tests/bench/gpu/step_profile.py --bin "$bin" --out "$logs/profile" ${WEFT_PROFILE_ARGS:-}

cat "$summary"
exit $failed
