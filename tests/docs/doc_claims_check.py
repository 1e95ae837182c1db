#!/usr/bin/env python3
"""Statements of the docs that the code can check, checked against the code:

- exit codes: README's "Exit codes:" sentence names every kExit* constant of
  contract/weft_contract.h with its value and meaning, and no other number;
- the operator's rights: the user guide's "The operator's rights" paragraph
  (docs/user-guide/install.md)
  lists, per resource, exactly the verbs of the chart's RBAC rules
  (charts/weft/templates/_helpers.tpl, weft.jobRules and weft.leaseRules);
- metric names: every `weft_...` name in backticks in the metrics and
  operator docs, the user guide (docs/user-guide.md and docs/user-guide/)
  and the README is a metric the code
  registers (a "weft_..." string in contract/, worker/, operator/ or
  clients/), one of its series (_bucket, _sum, _count), a program or library
  the build defines, or a name listed in NOT_METRICS with the reason.

Prints each mismatch and exits 1 if any. `--self-test` runs each check on
texts with one statement made false and fails unless each is caught.

Usage: doc_claims_check.py SOURCE_DIR [--self-test]
"""
import glob
import os
import re
import sys

# Backticked weft_ names in the docs that are no metric, program or library.
NOT_METRICS = {
    "weft_bucket_count": "the design's name, which docs/metrics.md says weft does not use",
    "weft_operator_tuner_": "a prefix: the tuner's metric family",
}

# kExit* constant -> words the README must give its number.
EXIT_MEANINGS = {
    "kExitDone": "done",
    "kExitBadConfig": "bad config",
    "kExitInternal": "internal",
    "kExitPeerLost": "peer lost",
    "kExitCheckpointIo": "checkpoint",
    "kExitDiverged": "diverged",
    "kExitInterrupted": "SIGINT",
    "kExitPreempted": "SIGTERM",
}


# The user guide page that holds "The operator's rights".
RIGHTS_PAGE = "docs/user-guide/install.md"


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


def exit_code_problems(readme, contract):
    consts = {m.group(1): int(m.group(2))
              for m in re.finditer(r"constexpr int (kExit\w+) = (\d+);", contract)}
    m = re.search(r"Exit codes:(.*?)\n\n", readme, re.S)
    if not m:
        return ["README.md: no 'Exit codes:' sentence"]
    sentence = " ".join(m.group(1).split())
    problems = []
    # "130/143 stopped by SIGINT/SIGTERM": a pair of numbers and a pair of words.
    said = {}
    for part in re.split(r",\s*", sentence.rstrip(".")):
        pm = re.match(r"(?:and\s+)?(\d+)(?:/(\d+))?\s+(.*)", part.strip())
        if not pm:  # a part without a number continues the one before
            continue
        nums = [int(pm.group(1))] + ([int(pm.group(2))] if pm.group(2) else [])
        for n in nums:
            said[n] = pm.group(3)
    for name, value in consts.items():
        word = EXIT_MEANINGS.get(name)
        if word is None:
            problems.append(f"contract/weft_contract.h: {name} has no meaning in {sys.argv[0]}'s EXIT_MEANINGS")
        elif value not in said:
            problems.append(f"README.md: exit code {value} ({name}) is not in the 'Exit codes:' sentence")
        elif word not in said[value] and word not in sentence.split(str(value), 1)[1][:80]:
            problems.append(f"README.md: exit code {value} is said to mean '{said[value]}', the code means {word}")
    for n in said:
        if n not in consts.values():
            problems.append(f"README.md: exit code {n} is no kExit* constant of contract/weft_contract.h")
    return problems


def chart_rules(helpers):
    """resource -> verbs of weft.jobRules, weft.kueueClusterRules and weft.leaseRules."""
    rules = {}
    for block in ("weft.jobRules", "weft.kueueClusterRules", "weft.leaseRules"):
        m = re.search(r'define "' + re.escape(block) + r'"(.*?)\{\{- end \}\}\s*\n\s*\n', helpers, re.S)
        body = m.group(1) if m else ""
        for rm in re.finditer(r"resources: \[([^\]]*)\]\s*\n\s*verbs: \[([^\]]*)\]", body):
            for res in rm.group(1).split(","):
                rules.setdefault(res.strip(), set()).update(v.strip() for v in rm.group(2).split(","))
    return rules


def rbac_problems(guide, helpers):
    m = re.search(r"\*\*The operator's rights\.\*\*(.*?)\n\n", guide, re.S)
    if not m:
        return [f"{RIGHTS_PAGE}: no 'The operator's rights' paragraph"]
    text = " ".join(m.group(1).split())
    rules = chart_rules(helpers)
    if not rules:
        return ["charts/weft/templates/_helpers.tpl: no rules found in weft.jobRules / weft.leaseRules"]
    said = {}
    for wm in re.finditer(r"\b([A-Za-z]+(?:/status)?):?\s+((?:get|list|watch|create|delete|update|patch)"
                          r"(?:/(?:get|list|watch|create|delete|update|patch))*)\b", text):
        res = wm.group(1).lower()
        if res == "lease":
            res = "leases"
        if res == "status":
            res = "trainingjobs/status"
        said.setdefault(res, set()).update(wm.group(2).split("/"))
    # "TrainingJobs get/list/... and status update": status is trainingjobs/status.
    sm = re.search(r"and status (update|patch)", text)
    if sm:
        said.setdefault("trainingjobs/status", set()).add(sm.group(1))
    said = {("trainingjobs" if r == "trainingjobs" else r): v for r, v in said.items()}
    problems = []
    for res, verbs in sorted(rules.items()):
        if res not in said:
            problems.append(f"{RIGHTS_PAGE}: the operator's rights do not list {res} ({'/'.join(sorted(verbs))})")
        elif said[res] != verbs:
            problems.append(f"{RIGHTS_PAGE}: the operator's rights give {res} {'/'.join(sorted(said[res]))}, "
                            f"the chart {'/'.join(sorted(verbs))}")
    for res in sorted(set(said) - set(rules)):
        problems.append(f"{RIGHTS_PAGE}: the operator's rights list {res}, which the chart does not grant")
    return problems


def code_names(root):
    names = set()
    for pattern in ("contract/*.h", "contract/*.cc", "worker/**/*.cc", "worker/**/*.h", "operator/**/*.cc",
                    "operator/**/*.h", "clients/**/*.cc", "clients/**/*.h"):
        for f in glob.glob(os.path.join(root, pattern), recursive=True):
            with open(f, encoding="utf-8") as src:
                names.update(re.findall(r'"(weft_[a-z0-9_]+)"', src.read()))
    return names


def source_files(root, name):
    """Every file NAME in the source tree: build trees (build*, where the
    local clusters keep their nodes' image layers and pods) and .git are not
    walked."""
    for d, dirs, files in os.walk(root):
        if d == root:
            dirs[:] = [x for x in dirs if not x.startswith("build") and x != ".git"]
        if name in files:
            yield os.path.join(d, name)


def build_names(root):
    names = set()
    for f in source_files(root, "CMakeLists.txt"):
        with open(f, encoding="utf-8") as src:
            text = src.read()
            names.update(re.findall(r"add_(?:executable|library)\(\s*(weft_[a-z0-9_]+)", text))
    # tests/CMakeLists.txt: one binary weft_<area>_tests per folder of *_test.cc.
    for d in glob.glob(os.path.join(root, "tests", "*", "")):
        if glob.glob(os.path.join(d, "*_test.cc")):
            names.add(f"weft_{os.path.basename(os.path.dirname(d))}_tests")
    return names


def metric_problems(docs, metrics, programs):
    problems = []
    for path, text in docs.items():
        for name in sorted(set(re.findall(r"`(weft_[a-z0-9_]+)", text))):
            # weft_step_seconds_{sum,count}: the family before the braces.
            base = re.sub(r"_(bucket|sum|count)$", "", name).rstrip("_")
            if name in metrics or base in metrics or name in programs or name in NOT_METRICS:
                continue
            problems.append(f"{path}: `{name}` is no metric the code registers (nor a program or library)")
    return problems


def doc_texts(root):
    paths = ["README.md", "docs/metrics.md", "docs/user-guide.md", *sorted(
        os.path.relpath(p, root) for pattern in ("docs/user-guide/*.md", "docs/operator/*.md")
        for p in glob.glob(os.path.join(root, pattern)))]
    return {p: read(root, p) for p in paths}


def check(root):
    return (exit_code_problems(read(root, "README.md"), read(root, "contract/weft_contract.h")) +
            rbac_problems(read(root, RIGHTS_PAGE), read(root, "charts/weft/templates/_helpers.tpl")) +
            metric_problems(doc_texts(root), code_names(root), build_names(root)))


def self_test(root):
    """Each check, fed one false statement, must report it."""
    readme, contract = read(root, "README.md"), read(root, "contract/weft_contract.h")
    guide, helpers = read(root, RIGHTS_PAGE), read(root, "charts/weft/templates/_helpers.tpl")
    docs, metrics, programs = doc_texts(root), code_names(root), build_names(root)
    cases = {  # name -> (the problems found, what one of them must say)
        "exit code 4 said to be 5": (exit_code_problems(readme.replace("4 checkpoint I/O", "5 checkpoint I/O"),
                                                        contract), "exit code 4 (kExitCheckpointIo) is not"),
        "a constant the README omits": (exit_code_problems(
            readme, contract + "\ninline constexpr int kExitPeerLost2 = 7;\n"), "kExitPeerLost2"),
        "pods without delete": (rbac_problems(guide.replace("pods get/list/watch/create/delete",
                                                            "pods get/list/watch/create"), helpers), "give pods"),
        "a verb the chart lost": (rbac_problems(guide, helpers.replace(
            "resources: [services]\n  verbs: [list, watch, create]", "resources: [services]\n  verbs: [list, watch]")),
            "give services"),
        "a renamed metric": (metric_problems(docs, metrics - {"weft_compute_seconds_total"}, programs),
                             "`weft_compute_seconds_total` is no metric"),
    }
    failed = []
    for name, (problems, want) in cases.items():
        hit = [p for p in problems if want in p]
        print(f"self-test '{name}': {hit[0] if hit else 'NOT CAUGHT'}")
        if not hit:
            failed.append(name)
    return 1 if failed else 0


def main():
    root = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "."
    if "--self-test" in sys.argv:
        return self_test(root)
    problems = check(root)
    for p in problems:
        print(p)
    print(f"doc claims: {len(problems)} mismatch(es)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
