#!/bin/sh
# ctest gpu.memcheck: compute-sanitizer memcheck over the CUDA op tests.
# Exit 77 (ctest SKIP_RETURN_CODE) when there is no sanitizer or no GPU, so the
# test shows as skipped, never as passed.
# usage: memcheck.sh <weft_gpu_tests binary>
set -u
bin="$1"
sanitizer="${WEFT_COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}"
if [ ! -x "$sanitizer" ]; then
  echo "gpu.memcheck skipped: compute-sanitizer not found at $sanitizer"
  exit 77
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "gpu.memcheck skipped: no CUDA device (nvidia-smi -L lists none)"
  exit 77
fi
exec "$sanitizer" --tool memcheck --error-exitcode 1 \
  "$bin" --gtest_filter='CudaOps.*:CudaAllocator.*' --gtest_brief=1
