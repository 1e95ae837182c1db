#!/usr/bin/python3
"""Renders the Grafana dashboard's panels from real data, for the user guide.

Grafana is not packaged in Debian, so this draws the panels itself: it runs a
real 2-rank training run (weft-run, tiny preset, the bucket cap changed half
way through the bucket_cap_file as the tuner would), has a real Prometheus
(Debian's `prometheus`) scrape both ranks every second with the labels a
Kubernetes scrape would add (namespace, job), sends every panel's PromQL from
charts/weft/dashboards/*.json (variables at "All") to Prometheus's
query_range API and plots the results with matplotlib. The picture is a
rendering of query results, not a Grafana screenshot.

Usage: docs/tools/render_dashboard.py [--bin build/bin] [--out docs/img/dashboard.png] [--steps 240]
Needs: python3-matplotlib, prometheus (scripts/install-deps.sh test docs).
"""
import argparse
import json
import math
import os
import pathlib
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SRC = pathlib.Path(__file__).resolve().parents[2]


def free_port(n=1):
    """A base port p with p..p+n-1 free."""
    while True:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if p + n < 65000 and all(_free(p + i) for i in range(n)):
            return p


def _free(p):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p))
            return True
        except OSError:
            return False


def query_range(port, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query_range?{q}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def substitute(expr, rate):
    for var in ("namespace", "job", "rank"):
        expr = expr.replace(f"${var}", ".*")
    return expr.replace("$__rate_interval", rate)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(SRC / "build/bin"))
    ap.add_argument("--out", default=str(SRC / "docs/img/dashboard.png"))
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--dashboard", default=str(SRC / "charts/weft/dashboards/weft-sync-overlap.json"))
    args = ap.parse_args()
    dash = json.load(open(args.dashboard))
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="weft-dash-"))
    metrics_port, prom_port = free_port(2), free_port()
    cap_file = tmp / "bucket_cap_mb"
    cap_file.write_text("0.25\n")
    (tmp / "job.yaml").write_text(
        f"preset: tiny\ntrain: {{steps: {args.steps}, log_every: 20}}\n"
        f"parallel: {{strategy: dp, bucket_cap_mb: 0.25, bucket_cap_file: {cap_file}}}\n"
        f"metrics: {{port: {metrics_port}}}\n")
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n- job_name: tiny-cpu\n  static_configs:\n"
        f"  - targets: ['127.0.0.1:{metrics_port}', '127.0.0.1:{metrics_port + 1}']\n"
        "    labels: {namespace: team-a}\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/tsdb",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=open(tmp / "prometheus.log", "w"), stderr=subprocess.STDOUT)
    try:
        time.sleep(3)
        start = time.time()
        run = subprocess.Popen([f"{args.bin}/weft-run", "-n", "2", "--", str(tmp / "job.yaml"), "--out",
                                str(tmp / "run"), "--no-resume"], stdout=open(tmp / "run.log", "w"),
                               stderr=subprocess.STDOUT)
        # Half way, a larger cap, as the operator's tuner would write it.
        while run.poll() is None:
            time.sleep(1)
            if time.time() - start > 5 and cap_file.read_text().strip() == "0.25":
                summary_step = _step(metrics_port)
                if summary_step and summary_step >= args.steps // 2:
                    cap_file.write_text("1\n")
        if run.returncode != 0:
            raise SystemExit(f"training failed, see {tmp}/run.log")
        time.sleep(3)
        end = time.time()
        rate = "4s"
        panels = [p for p in dash["panels"] if p.get("type") != "row" and p.get("targets")]
        cols = 3
        rows = math.ceil(len(panels) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(18, 3.2 * rows))
        for ax, panel in zip(axes.flat, panels):
            n = 0
            for t in panel["targets"]:
                expr = substitute(t["expr"], rate)
                for series in query_range(prom_port, expr, start, end, 1):
                    if n >= 8:
                        break
                    xs = [float(v[0]) - start for v in series["values"]]
                    ys = [float(v[1]) for v in series["values"]]
                    labels = {k: v for k, v in series["metric"].items() if k not in ("namespace", "job", "instance")}
                    name = t.get("legendFormat") or ""
                    for k, v in series["metric"].items():
                        name = name.replace("{{" + k + "}}", v)
                    ax.plot(xs, ys, label=(name or ",".join(f"{k}={v}" for k, v in labels.items()) or "value")[:40])
                    n += 1
            ax.set_title(panel["title"], fontsize=10)
            ax.tick_params(labelsize=7)
            ax.set_xlabel("seconds since start", fontsize=7)
            if n:
                ax.legend(fontsize=6, loc="best")
            else:
                ax.text(0.5, 0.5, "no data (strategy not in this run)", ha="center", va="center",
                        transform=ax.transAxes, fontsize=8, color="gray")
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")
        fig.suptitle(f"{dash.get('title', 'weft')}: a rendering of the dashboard's PromQL on real Prometheus data "
                     f"(2-rank tiny run, {args.steps} steps, bucket cap 0.25 -> 1 MiB half way; not a Grafana screenshot)",
                     fontsize=11)
        fig.tight_layout(rect=(0, 0, 1, 0.97))
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        fig.savefig(args.out, dpi=72)
        print(f"wrote {args.out} ({len(panels)} panels)")
    finally:
        prom.terminate()
        prom.wait()


def _step(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("weft_step{") or line.startswith("weft_step "):
                    return float(line.split()[-1])
    except OSError:
        return None
    return None


if __name__ == "__main__":
    main()
