#!/usr/bin/env python3
"""RBAC is exactly what weft-operator calls.

Lists every (verb, resource) the operator's code sends to the API server by
reading its sources: each KubeApi call (`api_.create(kube::kPods, ...)`), the
list+watch of every Informer built on a resource, and calls whose resource is
a variable resolved through the helper's call sites. Then renders the chart
(ClusterRole, and the namespaced Roles) and proves the rules grant exactly
that set: a verb the code uses but the chart lacks fails, and so does a grant
the code never uses. The code is operator/ and the Kubernetes client it links
(clients/kube: events, leases, informers); localcluster/node/ (weft-node, the
test kubelet) is not the operator and is skipped.

Two grants are also checked for where they are: the leader-election Lease
only by a Role in the release namespace (the operator's own), never by a
ClusterRole; and with networkPolicy.perJob=false the operator is told to
create no NetworkPolicies and the chart grants none.

Usage: rbac_exact_check.py SOURCE_DIR [HELM]   (default: tests/kube/get-helm.sh fetches it;
       exit 77 = skipped when it cannot)
Adding a call: add the verb to charts/weft/templates/_helpers.tpl as well.
"""
import pathlib
import re
import subprocess
import sys

import yaml

METHOD_VERB = {"get": "get", "list": "list", "watch": "watch", "create": "create", "update": "update",
               "update_status": "update", "merge_patch": "patch", "remove": "delete"}
# The first argument whole (up to its comma), so a resource the check cannot
# read (`*child.res`) is reported, not skipped.
CALL = re.compile(r"\bapi_?(?:\(\))?\s*(?:\.|->)\s*(" + "|".join(METHOD_VERB) + r")\s*\(\s*([^,()]+?)\s*[,)]")
CONST = re.compile(r"^(?:kube::)?(k[A-Z]\w*)$")
# Informer construction: `x_(api, kube::kPods, ...)` / `Informer inf(api, kube::kPods, ...)`.
INFORMER = re.compile(r"\(\s*api_?\s*,\s*(?:kube::)?(k[A-Z]\w*)\s*,")


def resource_table(src):
    """kX -> (group, plural) from clients/kube/resource.h."""
    text = (src / "clients/kube/resource.h").read_text()
    table = {}
    for name, group, plural in re.findall(r'inline const Resource (k\w+)\{"([^"]*)", "[^"]*", "([^"]*)"', text):
        table[name] = (group, plural)
    if not table:
        sys.exit("FAIL: no Resource constants found in clients/kube/resource.h")
    return table


def call_args(text, start):
    """The argument text of the call whose '(' is at or after start."""
    i = text.index("(", start)
    depth = 0
    for j in range(i, len(text)):
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
    return text[i + 1:]


def helper_constants(text, var, pos):
    """Resource constants passed to the callable whose parameter `var` is used at pos."""
    decl = None
    for m in re.finditer(r"auto\s+(\w+)\s*=\s*\[[^\]]*\]\s*\(([^)]*)\)", text[:pos]):
        if re.search(r"Resource\s*&?\s*" + re.escape(var) + r"\b", m.group(2)):
            decl = m
    if decl is None:
        return None
    name = decl.group(1)
    consts = set()
    for m in re.finditer(r"\b" + re.escape(name) + r"\s*\(", text[decl.end():]):
        consts.update(re.findall(r"(?:kube::)?(k[A-Z]\w*)", call_args(text[decl.end():], m.start())))
    return consts or None


def loop_constants(text, var, pos):
    """Resource constants a loop `for (const kube::Resource* var : {&kube::kX, ...})` before pos runs over."""
    decl = None
    pattern = r"for\s*\(\s*(?:const\s+)?(?:kube::)?Resource\s*\*\s*" + re.escape(var) + r"\s*:\s*\{([^}]*)\}\s*\)"
    for m in re.finditer(pattern, text[:pos]):
        decl = m
    return set(re.findall(r"(?:kube::)?(k[A-Z]\w*)", decl.group(1))) if decl else None


def used_by_code(src, table):
    used, problems = {}, []
    files = sorted(p for d in ("operator", "clients") for p in (src / d).rglob("*") if p.suffix in (".cc", ".h"))
    files = [p for p in files if p.name not in ("kube_api.cc", "kube_api.h")]
    informer_consts = set()
    for f in files:
        text = f.read_text()
        for m in INFORMER.finditer(text):
            if m.group(1) in table:
                informer_consts.add(m.group(1))
    for f in files:
        text = f.read_text()
        rel = f.relative_to(src)
        for m in CALL.finditer(text):
            method, arg = m.group(1), m.group(2)
            line = text.count("\n", 0, m.start()) + 1
            where = f"{rel}:{line}"
            c = CONST.match(arg)
            if c and c.group(1) in table:
                consts = {c.group(1)}
            elif f.name == "informer.cc" and arg == "resource_":
                consts = informer_consts  # Informer::list/watch on the resource it was built with
            elif arg.startswith("*"):
                consts = loop_constants(text, arg[1:].strip(), m.start())
            else:
                consts = helper_constants(text, arg, m.start())
            if not consts:
                problems.append(f"{where}: cannot tell which resource `{arg}` is in api_.{method}(...)")
                continue
            status = method == "update_status" or (
                method == "merge_patch" and re.search(r",\s*true\s*$", call_args(text, m.start()).strip()))
            for k in consts:
                group, plural = table[k]
                key = (METHOD_VERB[method], group, plural + ("/status" if status else ""))
                used.setdefault(key, []).append(where)
    return used, problems


RELEASE_NAMESPACE = "weft-system"
# Resources the operator only touches in its own (the release) namespace.
OWN_NAMESPACE_ONLY = {("coordination.k8s.io", "leases")}
NETWORK_POLICIES = ("networking.k8s.io", "networkpolicies")
KUEUE_GROUP = "kueue.x-k8s.io"


def kube_floor(src):
    """The oldest Kubernetes the chart supports (its kubeVersion, ">=X.Y.Z-0"):
    helm template's default (v1.32 for Helm 3.17) is below it."""
    m = re.search(r'^kubeVersion: *">=([0-9.]+)-0"$', (src / "charts/weft/Chart.yaml").read_text(), re.M)
    if not m:
        sys.exit("FAIL: no kubeVersion >=X.Y.Z-0 in charts/weft/Chart.yaml")
    return m.group(1)


def render(helm, src, flags):
    out = subprocess.run([helm, "template", "weft", str(src / "charts/weft"), "--namespace", RELEASE_NAMESPACE,
                          "--kube-version", kube_floor(src)] + flags,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"FAIL: helm template {' '.join(flags)}: {out.stderr}")
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def granted_by_chart(docs):
    """All (verb, group, resource) the Roles and ClusterRoles grant, and where
    each (group, resource) is granted: {(group, resource): {"ClusterRole" or "Role/<ns>"}}."""
    granted, where = set(), {}
    kinds = []
    for doc in docs:
        if doc.get("kind") not in ("ClusterRole", "Role"):
            continue
        kinds.append(doc["kind"])
        place = doc["kind"] if doc["kind"] == "ClusterRole" else "Role/" + doc["metadata"].get("namespace", "")
        for rule in doc.get("rules", []):
            for g in rule.get("apiGroups", []):
                for r in rule.get("resources", []):
                    where.setdefault((g, r), set()).add(place)
                    for v in rule.get("verbs", []):
                        granted.add((v, g, r))
    return granted, where, kinds


def placement_errors(where):
    errors = []
    for res in sorted(OWN_NAMESPACE_ONLY):
        bad = sorted(p for p in where.get(res, ()) if p != "Role/" + RELEASE_NAMESPACE)
        if bad:
            errors.append(f"{res[1]} must only be granted by a Role in the release namespace "
                          f"{RELEASE_NAMESPACE}, but {', '.join(bad)} grants them")
    return errors


def operator_args(docs):
    for doc in docs:
        if doc.get("kind") == "Deployment":
            return doc["spec"]["template"]["spec"]["containers"][0].get("args", [])
    sys.exit("FAIL: the chart renders no Deployment")


def compare(used, granted):
    fmt = lambda k: f"{k[0]} {k[2]}" + (f".{k[1]}" if k[1] else "")
    errors = [f"the operator calls `{fmt(k)}` ({', '.join(used[k][:3])}) but the chart does not grant it"
              for k in sorted(set(used) - granted)]
    errors += [f"the chart grants `{fmt(k)}` but no operator code uses it" for k in sorted(granted - set(used))]
    return errors


def main():
    src = pathlib.Path(sys.argv[1]).resolve()
    if len(sys.argv) > 2:
        helm = sys.argv[2]
    else:
        got = subprocess.run([str(src / "tests/kube/get-helm.sh")], capture_output=True, text=True)
        if got.returncode != 0:
            print(got.stderr, file=sys.stderr)
            sys.exit(got.returncode)
        helm = got.stdout.strip()
    table = resource_table(src)
    used, problems = used_by_code(src, table)
    if problems:
        sys.exit("FAIL: " + "\n  ".join(problems))
    if len(used) < 5:
        sys.exit(f"FAIL: found only {len(used)} (verb, resource) pairs; the scan is broken")
    print("operator uses:", ", ".join(f"{v} {r}" + (f".{g}" if g else "") for v, g, r in sorted(used)))
    # The comparison itself must catch both directions.
    extra = compare(used, set(used) | {("get", "", "nodes")})
    missing = compare(used, set(used) - {sorted(used)[0]})
    if len(extra) != 1 or len(missing) != 1:
        sys.exit("FAIL: compare() does not report an extra or a missing grant")
    # The placement check itself must catch a ClusterRole lease grant.
    if not placement_errors({("coordination.k8s.io", "leases"): {"ClusterRole", "Role/" + RELEASE_NAMESPACE}}):
        sys.exit("FAIL: placement_errors() does not report a cluster-wide lease grant")
    failed = False
    no_np = {k for k in used if (k[1], k[2]) == NETWORK_POLICIES}
    if not no_np:
        print("FAIL: the operator's code creates no NetworkPolicy", file=sys.stderr)
        failed = True
    # Kueue's objects are only touched with --kueue (operator.kueue).
    kueue = {k for k in used if k[1] == KUEUE_GROUP}
    if not kueue:
        print("FAIL: the operator's code touches no Kueue Workload", file=sys.stderr)
        failed = True
    without = lambda *sets: {k: v for k, v in used.items() if not any(k in s for s in sets)}
    namespaced = ["--set", "rbac.namespaced=true", "--set", "operator.watchNamespace=team-a"]
    modes = [
        ("ClusterRole", [], without(kueue)),
        ("namespaced Roles", namespaced, without(kueue)),
        # The operator is started with --no-network-policy: its NetworkPolicy
        # calls are never made, and nothing grants them.
        ("ClusterRole, networkPolicy.perJob=false", ["--set", "networkPolicy.perJob=false"], without(no_np, kueue)),
        ("ClusterRole, operator.kueue=true", ["--set", "operator.kueue=true"], used),
        ("namespaced Roles, operator.kueue=true", namespaced + ["--set", "operator.kueue=true"], used),
    ]
    for mode, flags, want in modes:
        docs = render(helm, src, flags)
        granted, where, kinds = granted_by_chart(docs)
        errors = compare(want, granted) + placement_errors(where)
        perjob_off = "networkPolicy.perJob=false" in flags
        if perjob_off != ("--no-network-policy" in operator_args(docs)):
            errors.append("the Deployment's --no-network-policy does not follow networkPolicy.perJob")
        if ("operator.kueue=true" in flags) != ("--kueue" in operator_args(docs)):
            errors.append("the Deployment's --kueue does not follow operator.kueue")
        if errors:
            failed = True
            print(f"FAIL ({mode}):\n  " + "\n  ".join(errors), file=sys.stderr)
        else:
            print(f"ok: {mode} ({', '.join(kinds)}) grant exactly the {len(want)} (verb, resource) pairs; "
                  f"leases only in {RELEASE_NAMESPACE}")
    if failed:
        sys.exit(1)
    print("PASS: chart RBAC is exactly what the operator calls")


if __name__ == "__main__":
    main()
