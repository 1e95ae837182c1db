#!/usr/bin/env python3
"""Peak resident memory per rank as ZeRO and ISP spread a model over N ranks.

A 33.6 M-parameter Llama (d_model 512, 8 layers, vocab 8192; 134 MB of f32
weights) trains 3 steps and checkpoints after every step, so the peak covers
initialisation, training, the sharded checkpoints and the last checkpoint's
Hugging Face export. For each run: the largest peak RSS over the ranks (each
rank logs its own), and the seconds rank 0's checkpoints held training up
(summary.json phase_seconds.checkpoint, 3 checkpoints). N = 1 is plain DP on one rank
(ZeRO needs 2) and ISP on one rank.

Pass --bin for another build's bin directory to put its column beside this
build's (the before/after table of docs/benchmarks/memory.md).

usage: memory_scaling.py BUILD_DIR [--bin OTHER_BIN --label OTHER]
"""
import argparse
import json
import os
import re
import subprocess
import tempfile
import time

MODEL = {"vocab_size": 8192, "d_model": 512, "n_layers": 8, "n_heads": 8, "n_kv_heads": 4, "max_seq_len": 64}
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
ZERO2 = {"strategy": "zero", "zero": {"stage": 2}}
RUNS = [("DP", 1, {"strategy": "dp"}, {}), ("ZeRO-2", 2, ZERO2, {}), ("ZeRO-2", 4, ZERO2, {}),
        ("ZeRO-2, checkpoint.async", 4, ZERO2, {"async": "true"}),
        ("ISP", 1, {"strategy": "isp"}, {}), ("ISP", 2, {"strategy": "isp", "wp": 2}, {}),
        ("ISP", 4, {"strategy": "isp", "wp": 4}, {})]


def run(bindir, tmp, name, n, parallel, ckpt):
    out = os.path.join(tmp, name)
    cfg = {"preset": "tiny", "model": MODEL,
           "train": {"steps": 3, "micro_batch": 1, "seq_len": 64, "log_every": 1, "out_dir": out},
           "checkpoint": dict({"every": 1, "keep": 2, "resume": False}, **ckpt), "metrics": {"port": 0}, "parallel": parallel}
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        json.dump(cfg, f)
    t0 = time.time()
    p = subprocess.run([os.path.join(bindir, "weft-run"), "-n", str(n), path], env=ENV, capture_output=True,
                       text=True)
    wall = time.time() - t0
    text = p.stdout + p.stderr
    if p.returncode != 0:
        return {"code": p.returncode, "why": text.strip().splitlines()[-1]}
    rss = [float(m) for m in re.findall(r"peak RSS (\d+(?:\.\d+)?) MiB", text)]
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    mem = summary["memory_bytes"]
    return {"code": 0, "rss": max(rss), "ranks": len(rss), "wall": wall, "ckpt": summary["phase_seconds"]["checkpoint"],
            "held": sum(mem.get(k, 0) for k in ("param", "isp_pool", "grad", "optimizer")) / 1048576}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--bin", help="another build's bin directory, measured in the same run")
    ap.add_argument("--label", default="before")
    a = ap.parse_args()
    builds = [("this build", os.path.join(a.build, "bin"))] + ([(a.label, a.bin)] if a.bin else [])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for strategy, n, parallel, ckpt in RUNS:
            row = [strategy, n]
            for k, (label, bindir) in enumerate(builds):
                if ckpt and k > 0:  # a setting the other build may not have
                    row.append({"code": None})
                    continue
                r = run(bindir, tmp, f"{len(rows)}-{k}", n, parallel, ckpt)
                row.append(r)
            rows.append(row)
    head = " | ".join(f"peak RSS per rank, {label} | checkpoints (training held up), {label}" for label, _ in builds)
    print(f"| strategy | N | weights+grads+optimizer held (rank 0) | {head} |")
    print("|---|---|---|" + "---|---|" * len(builds))
    for strategy, n, *results in rows:
        cells = []
        for r in results:
            if r["code"] is None:
                cells += ["", ""]
            elif r["code"] != 0:
                cells += [f"fails: exit {r['code']} ({r['why'][:80]})", ""]
            else:
                cells += [f"{r['rss']:.0f} MiB", f"{r['ckpt']:.2f} s"]
        held = results[0].get("held", 0)
        print(f"| {strategy} | {n} | {held:.0f} MiB | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
