#!/usr/bin/python3
"""Runs every query of Grafana dashboards against a Prometheus-compatible API
the way Grafana runs them, and says which return no data.

Per dashboard: each template variable's label_values() through
/api/v1/label/<label>/values (the wanted value must be listed), each
annotation and each panel target through /api/v1/query_range over
[START, END] with step = the scrape interval, $__interval the same and
$__rate_interval = max($__interval + scrape interval, 4 * scrape interval),
Grafana's definition. Queries without data are retried until --deadline
seconds have passed (data may still be arriving), each retry with END moved
to its own time, as a dashboard on "last N minutes" refreshes: a series
whose first sample comes after the call (a held-out loss logged every N
steps) counts when it comes.

--positive 'EXPR_SUBSTRING:label=value' additionally requires a point above 0,
at --positive-after or later, in a series with that label from a target whose
query contains the substring.

Usage: dashboard_queries.py URL START END --var name=value ... [--scrape-interval 2]
       [--deadline 120] [--positive ... --positive-after T] DASHBOARD.json ...
Prints one line per dashboard (queries run, with data) and every failure;
exits 1 on any failure.
"""
import argparse
import json
import re
import sys
import time
import urllib.parse
import urllib.request


def get(url, path, params):
    q = urllib.parse.urlencode(params, doseq=True)
    try:
        with urllib.request.urlopen(f"{url}{path}?{q}", timeout=30) as r:
            return json.load(r)
    except Exception as e:  # noqa: BLE001 - a failed request is a failed check
        return {"status": "error", "error": str(e)}


def substitute(expr, variables):
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", variables[name]).replace("$" + name, variables[name])
    return expr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("start", type=float)
    ap.add_argument("end", type=float)
    ap.add_argument("dashboards", nargs="+")
    ap.add_argument("--var", action="append", default=[])
    ap.add_argument("--scrape-interval", type=float, default=15)
    ap.add_argument("--deadline", type=float, default=120)
    ap.add_argument("--positive", action="append", default=[])
    ap.add_argument("--positive-after", type=float, default=0)
    a = ap.parse_args()
    wanted = dict(v.split("=", 1) for v in a.var)
    si = a.scrape_interval
    interval = f"{int(si)}s"
    rate = f"{int(max(2 * si, 4 * si))}s"
    variables = {**wanted, "__interval": interval, "__rate_interval": rate, "__range": f"{int(a.end - a.start)}s"}

    checks = []  # (dashboard, kind, what, callable returning "" when fine or why not)
    for path in a.dashboards:
        dash = json.load(open(path))
        name = dash.get("title", path)
        for v in dash.get("templating", {}).get("list", []):
            if v.get("type") != "query":
                continue
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q)
            if not m:
                checks.append((name, "variable", v["name"], lambda q=q: f"not label_values(): {q}"))
                continue
            match, label = substitute(m.group(1), variables), m.group(2)

            def check_var(match=match, label=label, want=wanted.get(v["name"])):
                r = get(a.url, f"/api/v1/label/{label}/values", {"match[]": match, "start": a.start, "end": a.end})
                values = r.get("data") or []
                if r.get("status") != "success" or not values:
                    return f"no values: {r}"
                if want is not None and want != ".*" and want not in values:
                    return f"{want} not among {values}"
                return ""
            checks.append((name, "variable", f"{v['name']} = label_values({match}, {label})", check_var))
        targets = [("annotation", x.get("name", "?"), x.get("target", {}).get("expr") or x.get("expr", ""))
                   for x in dash.get("annotations", {}).get("list", []) if (x.get("target", {}).get("expr") or x.get("expr"))]
        stack = list(dash.get("panels", []))
        while stack:
            p = stack.pop(0)
            stack.extend(p.get("panels", []))
            targets += [("panel", p.get("title", "?"), t["expr"]) for t in p.get("targets", []) if t.get("expr")]
        for kind, title, expr in targets:
            expr = substitute(expr, variables)

            def check_range(expr=expr):
                r = get(a.url, "/api/v1/query_range", {"query": expr, "start": a.start, "end": a.end, "step": interval})
                if r.get("status") != "success":
                    return f"error: {r}"
                if not any(s.get("values") for s in r["data"]["result"]):
                    return "no data"
                return ""
            checks.append((name, kind, f"{title}: {expr}", check_range))

    for spec in a.positive:
        sub, sel = spec.rsplit(":", 1)
        label, value = sel.split("=", 1)
        exprs = [c[2].split(": ", 1)[1] for c in checks if c[1] == "panel" and sub in c[2]]
        if not exprs:
            print(f"FAIL --positive {spec}: no panel query contains '{sub}'")
            return 1

        def check_positive(expr=exprs[0], label=label, value=value):
            r = get(a.url, "/api/v1/query_range", {"query": expr, "start": a.start, "end": a.end, "step": interval})
            for s in (r.get("data") or {}).get("result", []):
                if s["metric"].get(label) == value and any(
                        float(v[1]) > 0 and float(v[0]) >= a.positive_after for v in s["values"]):
                    return ""
            return f"no point above 0 with {label}={value}: {r}"
        checks.append(("positive", "panel", f"{spec}: {exprs[0]}", check_positive))

    pending = list(checks)
    until = time.time() + a.deadline
    while True:
        a.end = max(a.end, time.time())
        pending = [c for c in pending if c[3]()]
        if not pending or time.time() > until:
            break
        time.sleep(2)
    for name in dict.fromkeys(c[0] for c in checks):
        mine = [c for c in checks if c[0] == name]
        bad = [c for c in pending if c[0] == name]
        kinds = {k: sum(1 for c in mine if c[1] == k) for k in ("panel", "variable", "annotation")}
        print(f"{name}: {len(mine) - len(bad)} of {len(mine)} with data "
              f"({kinds['panel']} panel queries, {kinds['variable']} variables, {kinds['annotation']} annotations)")
    for c in pending:
        print(f"FAIL {c[0]} {c[1]} {c[2]} -> {c[3]()[:400]}")
    return 1 if pending else 0


if __name__ == "__main__":
    sys.exit(main())
