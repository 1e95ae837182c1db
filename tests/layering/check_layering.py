#!/usr/bin/env python3
"""Checks the worker's layering: every quoted #include of a worker unit must
follow an edge of ALLOWED (a unit sees only the headers of what it links, see
worker/CMakeLists.txt and docs/architecture.md), and only operator/kube may
include cpprest. Prints each violation as file:line and exits 1 if any.

Usage: check_layering.py SOURCE_DIR
"""
import os
import re
import sys

# unit -> units whose headers it may include (besides its own).
ALLOWED = {
    "tensor": set(),
    "config": set(),
    "kernels": {"tensor"},
    "data": {"config", "tensor"},
    "comm": {"tensor"},
    "model": {"kernels", "tensor", "config"},
    "optim": {"model", "kernels", "tensor", "config"},
    "parallel": {"optim", "model", "kernels", "comm", "tensor", "config"},
    "train": {"parallel", "optim", "model", "kernels", "comm", "data", "tensor", "config"},
    "metrics": {"train", "comm", "tensor", "config"},
    "cli": {"metrics", "train", "parallel", "comm", "tensor", "config", "data", "model"},
}
# Headers a unit may not include although it may include the unit: the
# strategies and the optimizer see the model only through its parameter table
# and buffers, never the Llama class.
FORBIDDEN = {
    "parallel": {"model/llama.h"},
    "optim": {"model/llama.h"},
}
HEADER = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
CPPREST = re.compile(r'^\s*#\s*include\s+[<"]cpprest/')
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]')


def check_contract(root, bad):
    """contract/, linked by worker and operator alike, sees the standard
    library (<name>, no path, no extension) and its own headers only, so
    linking it pulls nothing into either side."""
    cdir = os.path.join(root, "contract")
    own = set(os.listdir(cdir))
    for f in sorted(own):
        if not f.endswith((".h", ".cc")):
            continue
        path = os.path.join(cdir, f)
        with open(path, encoding="utf-8") as src:
            for n, line in enumerate(src, 1):
                m = ANY_INCLUDE.match(line)
                if not m:
                    continue
                kind, name = m.groups()
                std = kind == "<" and "/" not in name and "." not in name
                if not std and not (kind == '"' and name in own):
                    bad.append(f"{os.path.relpath(path, root)}:{n}: contract/ may include only the standard "
                               f"library and contract/ headers, not {kind}{name}{'>' if kind == '<' else kind}")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    bad = []
    worker = os.path.join(root, "worker")
    for unit in sorted(os.listdir(worker)):
        udir = os.path.join(worker, unit)
        if not os.path.isdir(udir):
            continue
        if unit not in ALLOWED:
            bad.append(f"worker/{unit}: unit missing from the layering table in {sys.argv[0]}")
            continue
        for dirpath, _, files in os.walk(udir):
            for f in files:
                if not f.endswith((".h", ".cc", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as src:
                    for n, line in enumerate(src, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) != unit and m.group(1) in ALLOWED and m.group(1) not in ALLOWED[unit]:
                            bad.append(f"{os.path.relpath(path, root)}:{n}: {unit}/ may not include {m.group(1)}/ "
                                       f"(allowed: {', '.join(sorted(ALLOWED[unit])) or 'none'})")
                        h = HEADER.match(line)
                        if h and h.group(1) in FORBIDDEN.get(unit, ()):
                            bad.append(f"{os.path.relpath(path, root)}:{n}: {unit}/ may not include {h.group(1)}")
                        if CPPREST.match(line):
                            bad.append(f"{os.path.relpath(path, root)}:{n}: only operator/kube may include cpprest")
    for dirpath, _, files in os.walk(os.path.join(root, "operator")):
        if os.path.relpath(dirpath, root).startswith(os.path.join("operator", "kube")):
            continue
        for f in files:
            path = os.path.join(dirpath, f)
            if not f.endswith((".h", ".cc")):
                continue
            with open(path, encoding="utf-8") as src:
                for n, line in enumerate(src, 1):
                    if CPPREST.match(line):
                        bad.append(f"{os.path.relpath(path, root)}:{n}: only operator/kube may include cpprest")
    check_contract(root, bad)
    for b in bad:
        print(b)
    print(f"layering: {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
