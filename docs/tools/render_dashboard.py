#!/usr/bin/python3
"""Renders the Grafana dashboard's panels from a real scrape, for the docs.

Grafana is not packaged in Debian, so this draws the panels itself: it sends
every panel's PromQL from charts/weft/dashboards/*.json, with the variables
set to one TrainingJob (rank at "All") and Grafana's $__rate_interval, to a
Prometheus-compatible query_range API and plots the results with
matplotlib. The picture in the docs comes from the local cluster's
victoria-metrics (`WEFT_CLUSTER_METRICS=1 make cluster-up`), which scrapes
the ranks through Kubernetes pod discovery with the chart's scrape jobs: a
rendering of query results, not a Grafana screenshot. The time range is the
job's, found from its weft_step series.

Usage: docs/tools/render_dashboard.py --url http://127.0.0.1:PORT --namespace default --trainingjob tiny-cpu
         [--scrape-interval 5] [--out docs/img/dashboard.png] [--dashboard charts/weft/dashboards/weft-sync-overlap.json]
Needs: python3-matplotlib (scripts/install-deps.sh docs).
"""
import argparse
import json
import math
import os
import pathlib
import time
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SRC = pathlib.Path(__file__).resolve().parents[2]


def query_range(url, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{q}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def substitute(expr, variables):
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", variables[name]).replace("$" + name, variables[name])
    return expr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True, help="a Prometheus-compatible API, e.g. the local cluster's victoria-metrics")
    ap.add_argument("--namespace", default="default")
    ap.add_argument("--trainingjob", default="tiny-cpu")
    ap.add_argument("--scrape-interval", type=float, default=5)
    ap.add_argument("--out", default=str(SRC / "docs/img/dashboard.png"))
    ap.add_argument("--dashboard", default=str(SRC / "charts/weft/dashboards/weft-sync-overlap.json"))
    args = ap.parse_args()
    dash = json.load(open(args.dashboard))
    si = args.scrape_interval
    variables = {"namespace": args.namespace, "trainingjob": args.trainingjob, "rank": ".*",
                 "__interval": f"{int(si)}s", "__rate_interval": f"{int(4 * si)}s"}
    # The job's time range: where its ranks' weft_step has samples (last 6 h).
    now = time.time()
    sel = f'weft_step{{namespace="{args.namespace}", trainingjob="{args.trainingjob}"}}'
    seen = [float(v[0]) for s in query_range(args.url, f"count({sel})", now - 6 * 3600, now, si) for v in s["values"]]
    if not seen:
        raise SystemExit(f"no {sel} at {args.url} in the last 6 hours")
    start, end = min(seen) - si, max(seen) + si
    panels = [p for p in dash["panels"] if p.get("type") != "row" and p.get("targets")]
    cols = 3
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(18, 3.2 * rows))
    with_data = 0
    for ax, panel in zip(axes.flat, panels):
        n = 0
        for t in panel["targets"]:
            expr = substitute(t["expr"], variables)
            for series in query_range(args.url, expr, start, end, si):
                if n >= 8:
                    break
                xs = [float(v[0]) - start for v in series["values"]]
                ys = [float(v[1]) for v in series["values"]]
                labels = {k: v for k, v in series["metric"].items()
                          if k not in ("namespace", "trainingjob", "job", "instance", "pod", "node")}
                name = t.get("legendFormat") or ""
                for k, v in series["metric"].items():
                    name = name.replace("{{" + k + "}}", v)
                ax.plot(xs, ys, label=(name or ",".join(f"{k}={v}" for k, v in labels.items()) or "value")[:40])
                n += 1
        with_data += n > 0
        ax.set_title(panel["title"], fontsize=10)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("seconds since the job's first scrape", fontsize=7)
        if n:
            ax.legend(fontsize=6, loc="best")
        else:
            ax.text(0.5, 0.5, "no data (strategy not in this run)", ha="center", va="center",
                    transform=ax.transAxes, fontsize=8, color="gray")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"{dash.get('title', 'weft')}: the dashboard's PromQL on {args.namespace}/{args.trainingjob}, "
                 f"scraped through Kubernetes pod discovery every {si:g} s (not a Grafana screenshot)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    fig.savefig(args.out, dpi=72)
    print(f"wrote {args.out} ({with_data} of {len(panels)} panels with data, {end - start:.0f} s)")


if __name__ == "__main__":
    main()
