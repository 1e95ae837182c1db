#!/usr/bin/env bash
# The pinned Python environment the tests and benchmarks use: a venv under
# ~/.cache/weft/ made from python/requirements.txt (exact versions, sha256
# hashes), with the CUDA toolkit from NVIDIA's wheels inside it.
#
#   scripts/python-env.sh             # make or check it; prints what it does
#   scripts/python-env.sh --python    # ... then print the venv's python
#   scripts/python-env.sh --cuda-root # ... then print the CUDA root (nvcc, headers, libraries)
#   scripts/python-env.sh --relock    # re-resolve python/requirements.in into requirements.txt
#
# The venv is re-made when the lock file changes, when it was made by another
# Python, or when it is broken (a package that does not import, a CUDA wheel of
# another release than torch's); it says which. The wheels are kept in
# ~/.cache/weft/wheels and checked against the lock's hashes at every install,
# so a download cut halfway or a corrupt cached wheel is refused; the set-up
# then empties that cache and downloads once more.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lock=${WEFT_PYTHON_LOCK:-$root/python/requirements.txt}
# What a made venv must import (tests/setup/python_env_test.sh checks the
# set-up itself on a small lock); with torch, nvcc's CUDA release must be torch's.
imports=${WEFT_PYTHON_IMPORTS:-torch transformers safetensors numpy yaml}
venv=${WEFT_VENV:-$HOME/.cache/weft/venv}
wheels=${WEFT_WHEELS:-$HOME/.cache/weft/wheels}
want_minor=3.11   # the lock resolves cp311 wheels

log() { echo "python-env: $*" >&2; }
die() { log "$*"; exit 1; }

base_python() {  # the interpreter the venv is made from: python3.11 on PATH first
  local p
  for p in "${WEFT_BASE_PYTHON:-}" python3 python3.11 /usr/bin/python3; do
    [ -n "$p" ] || continue
    command -v "$p" >/dev/null 2>&1 || continue
    if [ "$("$p" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want_minor" ] \
       && "$p" -c 'import venv, ensurepip' 2>/dev/null; then
      command -v "$p"; return 0
    fi
  done
  return 1
}

relock() {
  local py tmp
  py=$(base_python) || die "no Python $want_minor with venv and ensurepip on PATH"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  "$py" -m venv "$tmp/v" && "$tmp/v/bin/pip" -q install --upgrade pip
  "$tmp/v/bin/pip" install --quiet --dry-run --ignore-installed --report "$tmp/report.json" \
    -r "$root/python/requirements.in"
  "$tmp/v/bin/python" - "$tmp/report.json" "$root/python/requirements.in" "$lock" <<'PY'
import json, sys
report, src, out = sys.argv[1:]
tops = [l.split("==")[0].split("[")[0].strip().lower() for l in open(src)
        if l.strip() and not l.startswith("#")]
extras = {l.split("[")[0].lower(): l.split("[")[1].split("]")[0] for l in open(src)
          if "[" in l and not l.startswith("#")}
rows = []
for item in json.load(open(report))["install"]:
    meta, info = item["metadata"], item["download_info"]
    name = meta["name"]
    sha = info["archive_info"]["hashes"]["sha256"]
    ex = extras.get(name.lower())
    spec = f"{name}[{ex}]" if ex else name
    rows.append((name.lower() not in tops, name.lower(),
                 f"{spec}=={meta['version']} \\\n    --hash=sha256:{sha}"))
with open(out, "w") as f:
    f.write("# python/requirements.in resolved for CPython 3.11 on Linux x86_64, with hashes.\n"
            "# Written by scripts/python-env.sh --relock; edit requirements.in, not this file.\n")
    for _, _, line in sorted(rows):
        f.write(line + "\n")
PY
  log "wrote $lock ($(grep -c '==' "$lock") packages)"
}

stamp_of() {  # what the venv must have been made from
  local py=$1
  echo "lock $(sha256sum "$lock" | cut -d' ' -f1)"
  echo "python $("$py" -c 'import sys, os; print(sys.version.split()[0], os.path.realpath(sys.executable))')"
}

# The checks a made venv must pass: every package imports, and the CUDA
# toolkit's release (nvcc) is the one torch was built with.
healthy() {
  "$venv/bin/python" - $imports <<'PY' 2>&1
import importlib, subprocess, sys, pathlib, re
for mod in sys.argv[1:]:
    try:
        importlib.import_module(mod)
    except Exception as e:  # one line: the reason the venv is re-made
        sys.exit(f"import {mod}: {type(e).__name__}: {e}")
if "torch" not in sys.argv[1:]:
    sys.exit(0)
import torch, nvidia
cu = pathlib.Path(list(nvidia.__path__)[0]) / "cu13"
nvcc = cu / "bin" / "nvcc"
if not nvcc.exists():
    sys.exit(f"no nvcc at {nvcc}")
out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout
m = re.search(r"release (\d+\.\d+)", out)
if not m:
    sys.exit(f"{nvcc} --version printed no release")
if torch.version.cuda is None or not torch.version.cuda.startswith(m.group(1)):
    sys.exit(f"nvcc is CUDA {m.group(1)} but torch was built with CUDA {torch.version.cuda}")
PY
}

# The wheels ship versioned libraries only (libcudart.so.13); a linker asks
# for libcudart.so. The unversioned names are made beside them, as a
# toolkit's own -dev packages do, for the libraries weft links or opens.
link_names() {
  local sp
  sp=$("$venv/bin/python" -c 'import nvidia, os; print(list(nvidia.__path__)[0])')
  local lib name
  for lib in cu13/lib/libcudart.so.13 cu13/lib/libcublas.so.13 cu13/lib/libcublasLt.so.13 \
             nccl/lib/libnccl.so.2 cudnn/lib/libcudnn.so.9; do
    [ -f "$sp/$lib" ] || die "the CUDA wheels lack $sp/$lib"
    name=${lib%.so.*}.so
    [ "$(readlink "$sp/$name" 2>/dev/null)" = "$(basename "$lib")" ] || ln -sfn "$(basename "$lib")" "$sp/$name"
  done
}

cuda_root() { "$venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))'; }

# Wheels are kept in ~/.cache/weft/wheels (pip's own HTTP cache may be
# refused by the registry's headers): a re-made venv downloads nothing. Every
# wheel is checked against the lock's sha256 when it is installed.
fetch_wheels() {
  mkdir -p "$wheels"
  "$venv/bin/python" -m pip download --progress-bar off --require-hashes --no-deps \
    -r "$lock" -d "$wheels" | grep -v '^File was already downloaded' || true
}

install_wheels() {
  "$venv/bin/python" -m pip install --progress-bar off --no-index --find-links "$wheels" \
    --require-hashes --no-deps -r "$lock"
}

make_venv() {
  local py=$1 why=$2
  log "making $venv ($why); wheels from $wheels (3.2 GB the first time)"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip -q install --upgrade pip >/dev/null
  if ! { fetch_wheels && install_wheels; }; then
    log "a wheel failed (a download cut halfway, or a cached wheel that fails its hash): emptying $wheels and downloading again"
    rm -rf "$wheels"
    { fetch_wheels && install_wheels; } || die "pip could not install $lock"
  fi
  # Only the lock's wheels stay in the cache.
  "$venv/bin/python" - "$lock" "$wheels" <<'PY'
import os, re, sys
lock, wheels = sys.argv[1:]
want = {(re.sub(r"[-_.]+", "_", n).lower(), v) for n, v in
        re.findall(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^ \\]+)", open(lock).read(), re.M)}
for f in os.listdir(wheels):
    parts = f.split("-")
    if len(parts) < 2 or (re.sub(r"[-_.]+", "_", parts[0]).lower(), parts[1]) not in want:
        os.remove(os.path.join(wheels, f))
PY
  local err
  err=$(healthy) || die "the new venv is broken: $err"
  stamp_of "$py" >"$venv/.weft-stamp"
  log "ready: $venv ($(du -sh "$venv" | cut -f1); wheels $(du -sh "$wheels" | cut -f1))"
}

ensure() {
  local py why="" err
  py=$(base_python) || die "no Python $want_minor with the venv module on PATH (pyenv's, or Debian's python3 with python3-venv)"
  mkdir -p "$(dirname "$venv")"
  exec 9>"${venv}.lock"
  flock 9
  if [ ! -f "$venv/.weft-stamp" ]; then
    why="none yet"; [ -e "$venv" ] && why="an unfinished one is there"
  elif [ "$(cat "$venv/.weft-stamp")" != "$(stamp_of "$py")" ]; then
    if [ "$(head -1 "$venv/.weft-stamp")" != "$(stamp_of "$py" | head -1)" ]; then
      why="$lock changed"
    else
      why="it was made by another Python ($(sed -n 's/^python //p' "$venv/.weft-stamp"))"
    fi
  elif ! [ -x "$venv/bin/python" ] || ! err=$(healthy); then
    why="it is broken: ${err:-no python}"
  fi
  if [ -n "$why" ]; then make_venv "$py" "$why"; fi
  case " $imports " in *" torch "*) link_names ;; esac
  flock -u 9
}

case "${1:-}" in
  --relock) relock ;;
  --python) ensure; echo "$venv/bin/python" ;;
  --cuda-root) ensure; cuda_root ;;
  "") ensure; log "ok: $venv" ;;
  *) die "usage: $0 [--python|--cuda-root|--relock]" ;;
esac
