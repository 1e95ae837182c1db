#!/usr/bin/env bash
# The GPU run, on the GPU machine, from the project root, the bundle in .gpu/
# (tests/gpu/prepare.sh makes it, its large libraries xz-packed, which the
# driver unpacks): sets up the environment and hands over to
# the budgeted driver, tests/gpu/gpu_run.py, which writes at most 8 files to
# its output folder (run.json, summary.md, logs.tar.gz, one JSON per phase) and keeps its
# logs under /tmp/weft-gpu-logs.
#   bash tests/gpu/gpu_checks.sh                      # the first set, 540 s
#   bash tests/gpu/gpu_checks.sh --set second --budget 300
# Arguments go to gpu_run.py (--phases, --budget, --out, ...).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# shellcheck disable=SC1091
[ -f .gpu/env.sh ] && . .gpu/env.sh
# cuDNN: the CUDA toolkit's, else the one in PyTorch's nvidia-cudnn wheel
# (weft opens it with dlopen; the preflight fails when it does not load).
cudnn_lib=$(python3 -c 'import nvidia.cudnn, os; print(list(nvidia.cudnn.__path__)[0] + "/lib")' 2>/dev/null || true)
[ -n "$cudnn_lib" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cudnn_lib
export WEFT_ATTENTION=${WEFT_ATTENTION:-cudnn} PYTHONUNBUFFERED=1
exec python3 tests/gpu/gpu_run.py "$@"
