#!/usr/bin/env bash
# scripts/python-env.sh on a one-package lock (PyYAML, hash-pinned as in
# python/requirements.txt): every path that re-makes the venv says why, and
# a cached wheel cut halfway is refused by its hash and downloaded again.
# usage: python_env_test.sh SOURCE_DIR WORK_DIR
set -euo pipefail
SRC=$1 W=$2
rm -rf "$W"; mkdir -p "$W"
export WEFT_VENV=$W/venv WEFT_WHEELS=$W/wheels WEFT_PYTHON_LOCK=$W/requirements.txt WEFT_PYTHON_IMPORTS=yaml
grep -A1 '^PyYAML==' "$SRC/python/requirements.txt" >"$WEFT_PYTHON_LOCK"
env=$SRC/scripts/python-env.sh
fail() { echo "FAIL: $*" >&2; exit 1; }
step() {  # step NAME EXPECTED-REGEX: runs the set-up, checks what it said
  local out
  out=$("$env" 2>&1) || fail "$1: the set-up failed: $out"
  echo "--- $1"; echo "$out"
  grep -Eq "$2" <<<"$out" || fail "$1: expected /$2/ in its output"
  "$WEFT_VENV/bin/python" -c 'import yaml' || fail "$1: yaml does not import"
}
step "first make" "making .* \(none yet\)"
out=$("$env" 2>&1); grep -q making <<<"$out" && fail "a healthy venv was made again: $out"
echo "--- kept: $out"

echo "# a comment" >>"$WEFT_PYTHON_LOCK"
step "lock changed" "making .*requirements.txt changed"

sed -i 's/^python .*/python 3.11.0 \/opt\/other\/python3.11/' "$WEFT_VENV/.weft-stamp"
step "another Python" "making .*made by another Python \(3.11.0 /opt/other/python3.11\)"

rm -rf "$WEFT_VENV"/lib/python3.11/site-packages/yaml
step "broken" "making .*it is broken: .*No module named 'yaml'"

whl=$(ls "$WEFT_WHEELS"/*.whl)
head -c 20000 "$whl" >"$whl.cut" && mv "$whl.cut" "$whl"
echo "# again" >>"$WEFT_PYTHON_LOCK"
# pip refuses it by the lock's hash and downloads it again (or, should the
# install fail, the set-up empties the cache and downloads everything again).
step "wheel cut halfway" "has bad hash\\. Re-downloading|a wheel failed .*emptying .* downloading again"
[ "$(stat -c %s "$(ls "$WEFT_WHEELS"/*.whl)")" -gt 20000 ] || fail "the cut wheel is still in the cache"

# A half-made venv (the set-up killed before its stamp) is made again.
rm -f "$WEFT_VENV/.weft-stamp"
step "unfinished" "making .*an unfinished one is there"
# A CUDA toolkit wheel of another release than torch's: a stand-in torch
# (built with CUDA 12.8) and nvcc (release 13.2) in the venv. The set-up
# names the mismatch and makes the venv again; the lock here has no torch,
# so the new venv is refused too, by name.
sp=$("$WEFT_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$sp/torch" "$sp/nvidia/cu13/bin"
printf 'class version:\n    cuda = "12.8"\n' >"$sp/torch/__init__.py"
printf '#!/bin/sh\necho "Cuda compilation tools, release 13.2, V13.2.86"\n' >"$sp/nvidia/cu13/bin/nvcc"
chmod +x "$sp/nvidia/cu13/bin/nvcc"
if out=$(WEFT_PYTHON_IMPORTS="yaml torch" "$env" 2>&1); then fail "CUDA mismatch: the set-up passed: $out"; fi
echo "--- CUDA mismatch"; echo "$out"
grep -q "making .*it is broken: nvcc is CUDA 13.2 but torch was built with CUDA 12.8" <<<"$out" ||
  fail "CUDA mismatch: not named as the reason to make the venv again"
grep -q "the new venv is broken: import torch" <<<"$out" || fail "CUDA mismatch: the torch-less venv was not refused"
echo "1 passed, 0 failed"
