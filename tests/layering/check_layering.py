#!/usr/bin/env python3
"""Checks the layering of the worker and of the operator: every quoted
#include of a worker unit must follow an edge of ALLOWED (a unit sees only the
headers of what it links, see worker/CMakeLists.txt and docs/architecture.md),
every quoted #include "dir/..." in an operator unit must name its own unit or
one of OPERATOR[unit]'s allowed units (clients/CMakeLists.txt,
operator/CMakeLists.txt, localcluster/CMakeLists.txt), and only clients/kube
may include cpprest. serving/ (the HTTP server both sides link) includes no
weft header but its own, and nothing includes prometheus-cpp's civetweb
exposer. Both tables must be acyclic. Forbidden headers (FORBIDDEN, OPERATOR_FORBIDDEN) are
followed through includes: a source that reaches one through any chain of
quoted includes is a violation, printed with the chain. Prints each violation as file:line and exits 1 if any.

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
# The control side's units: unit -> (its sources, relative to the root; units
# whose headers it may include besides its own). kube and scrape are the
# clients/ libraries weft-operator and weft-node share. "main" is the
# weft-operator program; "node" is the local-cluster node agent (weft-node),
# which only tests and local clusters use. tuning/ holds the types that trainingjob/
# (the reconciler) and tuner/ (the bucket-size decision) share, so that the
# reconciler calls the tuner and the tuner never sees the reconciler.
# config is the worker's config unit (worker/config): the operator reads
# spec.worker with the worker's own parser, validation and memory estimate,
# so the two programs share one schema (it includes nothing of the operator's).
OPERATOR = {
    "config": ("worker/config", set()),
    "kube": ("clients/kube", set()),
    "scrape": ("clients/scrape", set()),
    "tuning": ("operator/tuning", set()),
    "tuner": ("operator/tuner", {"tuning", "scrape"}),
    "trainingjob": ("operator/trainingjob", {"kube", "scrape", "tuning", "tuner", "config"}),
    "main": ("operator/main.cc", {"kube", "trainingjob"}),
    "node": ("localcluster/node", {"kube", "scrape"}),
}
# Headers some operator sources may not include although their unit may (by
# path prefix): a reconcile does no network I/O besides the API server's, the
# scrape poller (trainingjob/scrape_poller.h) reads the ranks' /metrics.
OPERATOR_FORBIDDEN = {
    "operator/trainingjob/reconciler": {"scrape/http_scraper.h"},
}
HEADER = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# Where a quoted include "dir/file.h" is found (the include paths of the
# CMake targets), in order.
INCLUDE_ROOTS = ("worker", "clients", "operator", "localcluster", "contract", "serving")


class IncludeGraph:
    """The quoted includes of every source, resolved against INCLUDE_ROOTS
    (or the including file's folder), to find the chain by which a file
    reaches a header."""

    def __init__(self, root):
        self.root = root
        self._direct = {}

    def _resolve(self, name, including):
        for base in (os.path.dirname(including), *(os.path.join(self.root, r) for r in INCLUDE_ROOTS)):
            p = os.path.normpath(os.path.join(base, name))
            if os.path.isfile(p):
                return p
        return None

    def direct(self, path):
        if path not in self._direct:
            out = []
            with open(path, encoding="utf-8") as src:
                for line in src:
                    h = HEADER.match(line)
                    if h:
                        out.append((h.group(1), self._resolve(h.group(1), path)))
            self._direct[path] = out
        return self._direct[path]

    def chain_to(self, path, targets):
        """The first chain of include names from `path` to a header named in
        `targets` (as written in an #include), or None."""
        seen, stack = {path}, [(path, [])]
        while stack:
            f, chain = stack.pop(0)
            for name, resolved in self.direct(f):
                if name in targets:
                    return chain + [name]
                if resolved and resolved not in seen:
                    seen.add(resolved)
                    stack.append((resolved, chain + [name]))
        return None


def forbidden_reach(graph, path, forbidden, root, bad):
    """A violation when `path` reaches a header of `forbidden`."""
    if not forbidden:
        return
    chain = graph.chain_to(path, forbidden)
    if chain:
        via = "" if len(chain) == 1 else " through " + " -> ".join(chain[:-1])
        bad.append(f"{os.path.relpath(path, root)}: may not include {chain[-1]}{via}")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
CPPREST = re.compile(r'^\s*#\s*include\s+[<"]cpprest/')
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]')


# The POSIX headers contract/ may use besides the standard library: what
# small_file.cc needs to open without blocking and check a file's type. They
# are the C library's, so linking contract/ still pulls nothing in.
CONTRACT_POSIX = {"fcntl.h", "sys/stat.h", "unistd.h"}


def check_own_includes(root, bad, folder, allowed, what):
    """Every #include of folder/'s sources passes allowed(kind, name, own),
    own being the folder's file names; what says what it may include."""
    fdir = os.path.join(root, folder)
    if not os.path.isdir(fdir):
        bad.append(f"{folder}: missing")
        return
    own = set(os.listdir(fdir))
    for f in sorted(own):
        if not f.endswith((".h", ".cc")):
            continue
        path = os.path.join(fdir, f)
        with open(path, encoding="utf-8") as src:
            for n, line in enumerate(src, 1):
                m = ANY_INCLUDE.match(line)
                if not m:
                    continue
                kind, name = m.groups()
                if not allowed(kind, name, own):
                    bad.append(f"{os.path.relpath(path, root)}:{n}: {folder}/ may include only {what}, not "
                               f"{kind}{name}{'>' if kind == '<' else kind}")


def check_contract(root, bad):
    """contract/, linked by worker and operator alike, sees the standard
    library (<name>, no path, no extension), the POSIX headers of
    CONTRACT_POSIX and its own headers only, so linking it pulls nothing into
    either side."""
    def allowed(kind, name, own):
        std = kind == "<" and (("/" not in name and "." not in name) or name in CONTRACT_POSIX)
        return std or (kind == '"' and name in own)
    check_own_includes(root, bad, "contract", allowed, "the standard library and contract/ headers")


# The folders of angle-bracket headers serving/ may use besides the standard
# library: the C library's and POSIX's (no folder, sys/, arpa/, netinet/) and
# prometheus-cpp's core.
SERVING_SYSTEM_DIRS = {"", "sys", "arpa", "netinet", "prometheus"}
# prometheus-cpp's pull exposer runs civetweb, whose few threads each wait on
# one idle keep-alive connection: two idle clients held a scrape of the
# operator 9-40 s (issue #70). Both sides serve with serving/metrics_server.h.
EXPOSER_HEADERS = {"prometheus/exposer.h", "civetweb.h", "CivetServer.h"}


def check_serving(root, bad):
    """serving/, linked by worker and operator alike, includes its own headers,
    the standard library, POSIX and prometheus-cpp's core only."""
    def allowed(kind, name, own):
        std = kind == "<" and "/" not in name and "." not in name
        system = kind == "<" and name.endswith(".h") and os.path.dirname(name) in SERVING_SYSTEM_DIRS
        return (std or system or (kind == '"' and name in own)) and name not in EXPOSER_HEADERS
    check_own_includes(root, bad, "serving", allowed,
                       "its own headers, the standard library, POSIX and prometheus-cpp's core")


def check_no_exposer(root, bad):
    """No source serves HTTP with prometheus-cpp's civetweb exposer."""
    for top in ("worker", "operator", "clients", "localcluster", "contract", "serving"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith((".h", ".cc", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as src:
                    for n, line in enumerate(src, 1):
                        m = ANY_INCLUDE.match(line)
                        if m and m.group(2) in EXPOSER_HEADERS:
                            bad.append(f"{os.path.relpath(path, root)}:{n}: {m.group(2)} (civetweb) waits on idle "
                                       f"connections: serve with serving/metrics_server.h")


def cycles(table, name):
    """A violation for each unit of `table` (unit -> allowed units) on a cycle."""
    out, state = [], {}

    def visit(u, path):
        if state.get(u) == "done":
            return
        if state.get(u) == "open":
            out.append(f"{name}: include cycle " + " -> ".join(path[path.index(u):] + [u]))
            return
        state[u] = "open"
        for v in sorted(table.get(u, ())):
            visit(v, path + [u])
        state[u] = "done"

    for u in sorted(table):
        visit(u, [])
    return out


def source_files(path):
    if os.path.isfile(path):
        yield path
        return
    for dirpath, _, files in os.walk(path):
        for f in sorted(files):
            if f.endswith((".h", ".cc")):
                yield os.path.join(dirpath, f)


def check_operator(root, bad):
    """The operator's units against OPERATOR."""
    op_allowed = {u: allowed for u, (_, allowed) in OPERATOR.items()}
    bad.extend(cycles(op_allowed, "OPERATOR"))
    prefix = {"node": "node"}  # include prefix of a unit, when not its name
    known = {prefix.get(u, u): u for u in OPERATOR}
    # Every folder and source under operator/ and clients/ belongs to a unit of the table.
    listed = {path for path, _ in OPERATOR.values()}
    for top in ("operator", "clients"):
        for entry in sorted(os.listdir(os.path.join(root, top))):
            rel = f"{top}/{entry}"
            full = os.path.join(root, rel)
            if (os.path.isdir(full) or entry.endswith((".h", ".cc"))) and rel not in listed:
                bad.append(f"{rel}: operator unit missing from the OPERATOR table in {sys.argv[0]}")
    graph = IncludeGraph(root)
    for unit, (path, allowed) in OPERATOR.items():
        full = os.path.join(root, path)
        if not os.path.exists(full):
            bad.append(f"{path}: listed in the OPERATOR table but missing")
            continue
        for f in source_files(full):
            rel = os.path.relpath(f, root)
            forbidden_reach(graph, f, set().union(*(h for p, h in OPERATOR_FORBIDDEN.items() if rel.startswith(p))),
                            root, bad)
            with open(f, encoding="utf-8") as src:
                for n, line in enumerate(src, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = known.get(m.group(1))
                    if target == unit:
                        continue
                    if target is None:
                        bad.append(f"{os.path.relpath(f, root)}:{n}: {unit} includes {m.group(1)}/, "
                                   f"which is no operator unit")
                    elif target not in allowed:
                        bad.append(f"{os.path.relpath(f, root)}:{n}: {unit} may not include {m.group(1)}/ "
                                   f"(allowed: {', '.join(sorted(allowed)) or 'none'})")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    bad = cycles(ALLOWED, "ALLOWED")
    check_operator(root, bad)
    worker = os.path.join(root, "worker")
    graph = IncludeGraph(root)
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
                forbidden_reach(graph, path, FORBIDDEN.get(unit, set()), root, bad)
                with open(path, encoding="utf-8") as src:
                    for n, line in enumerate(src, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) != unit and m.group(1) in ALLOWED and m.group(1) not in ALLOWED[unit]:
                            bad.append(f"{os.path.relpath(path, root)}:{n}: {unit}/ may not include {m.group(1)}/ "
                                       f"(allowed: {', '.join(sorted(ALLOWED[unit])) or 'none'})")
                        if CPPREST.match(line):
                            bad.append(f"{os.path.relpath(path, root)}:{n}: only clients/kube may include cpprest")
    for dirpath, _, files in [*os.walk(os.path.join(root, "operator")), *os.walk(os.path.join(root, "localcluster")),
                              *os.walk(os.path.join(root, "clients"))]:
        if os.path.relpath(dirpath, root).startswith(os.path.join("clients", "kube")):
            continue
        for f in files:
            path = os.path.join(dirpath, f)
            if not f.endswith((".h", ".cc")):
                continue
            with open(path, encoding="utf-8") as src:
                for n, line in enumerate(src, 1):
                    if CPPREST.match(line):
                        bad.append(f"{os.path.relpath(path, root)}:{n}: only clients/kube may include cpprest")
    check_contract(root, bad)
    check_serving(root, bad)
    check_no_exposer(root, bad)
    for b in bad:
        print(b)
    print(f"layering: {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
