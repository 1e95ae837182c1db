#!/usr/bin/env python3
"""ISP on this machine, 2 ranks with one thread each, all in one run:

1. step time and exposed weight-gather time (the prefetch wait) with
   parallel.isp.prefetch on vs off (wp 2), next to plain DP on the same
   global batch;
2. the bytes one rank holds for weights (shard + pool) and gradients, ISP vs
   DP;
3. a long sequence under a memory budget (`ulimit -v` on every rank): the
   largest budget plain DP on 2 ranks fails with, and ISP with sp 2 training
   the same sequence length within it.

Prints markdown tables for docs/benchmarks/isp.md.

usage: isp_step_time.py BUILD_DIR [--steps 12]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

MODEL = {"vocab_size": 2048, "d_model": 512, "n_layers": 4, "n_heads": 8, "n_kv_heads": 4, "max_seq_len": 4096}
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_WAIT_POLICY="passive")


def run(build, tmp, name, parallel, steps, micro_batch=4, seq_len=128, vm_kib=0, model=MODEL):
    out = os.path.join(tmp, name)
    cfg = {"preset": "tiny", "model": model,
           "train": {"steps": steps, "micro_batch": micro_batch, "seq_len": seq_len, "log_every": 0, "out_dir": out},
           "optim": {"grad_clip": 1.0},
           "checkpoint": {"dir": os.path.join(out, "ckpt"), "resume": False},
           "metrics": {"port": 0}, "parallel": parallel}
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        json.dump(cfg, f)
    cmd = [os.path.join(build, "bin", "weft-run"), "-n", "2", path]
    if vm_kib:
        cmd = ["/bin/sh", "-c", f"ulimit -v {vm_kib} && exec " + " ".join(cmd)]
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if p.returncode != 0:
        return {"code": p.returncode, "why": last_error(p.stdout + p.stderr)}
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    warm = slice(2, None)
    isp = s.get("isp", {})
    return {"code": 0, "step": statistics.median(s["step_seconds"][warm]),
            "gather": statistics.median(isp["weight_gather_seconds"][warm]) if isp.get("weight_gather_seconds") else 0,
            "wait": statistics.median(isp["prefetch_wait_seconds"][warm]) if isp.get("prefetch_wait_seconds") else 0,
            "mem": s["memory_bytes"], "rss": s["peak_rss_bytes"], "loss": s["final_loss"]}


def last_error(text):
    lines = [l for l in text.splitlines() if "error" in l.lower() or "bad_alloc" in l or "exited" in l]
    return lines[-1].strip() if lines else text.strip().splitlines()[-1]


def mib(b):
    return f"{b / 1048576:.1f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--steps", type=int, default=12)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # 1 + 2: wp 2 (both ranks see different data: global batch 8 x 128)
        dp = run(a.build, tmp, "dp", {"strategy": "dp"}, a.steps)
        on = run(a.build, tmp, "on", {"strategy": "isp", "wp": 2}, a.steps)
        off = run(a.build, tmp, "off", {"strategy": "isp", "wp": 2, "isp": {"prefetch": False}}, a.steps)
        print("| run | median step | weight gather (run time) | exposed gather wait | exposed / step |")
        print("|---|---|---|---|---|")
        print(f"| weft DP | {dp['step'] * 1e3:.0f} ms | | | |")
        for name, r in (("ISP wp 2, prefetch on", on), ("ISP wp 2, prefetch off", off)):
            print(f"| {name} | {r['step'] * 1e3:.0f} ms | {r['gather'] * 1e3:.0f} ms | {r['wait'] * 1e3:.0f} ms | "
                  f"{100 * r['wait'] / r['step']:.1f} % |")
        print()
        print("| bytes on rank 0 | weft DP | ISP wp 2 |")
        print("|---|---|---|")
        for k in ("param", "isp_pool", "grad", "optimizer"):
            print(f"| {k} | {mib(dp['mem'].get(k, 0))} | {mib(on['mem'].get(k, 0))} |")
        print(f"| weights: param + pool | {mib(dp['mem']['param'])} | "
              f"{mib(on['mem']['param'] + on['mem']['isp_pool'])} |")
        print(f"| peak RSS | {mib(dp['rss'])} | {mib(on['rss'])} |")
        print(f"\nfinal losses: DP {dp['loss']:.6f}, ISP prefetch on {on['loss']:.6f}, off {off['loss']:.6f}")

        # 3: one 4096-token sequence per data rank; a small model, so that
        # activations dominate. DP: 2 ranks, 2 sequences; ISP sp 2: 2 ranks
        # share one sequence (1 sequence per step: the same per-rank tokens).
        small = dict(MODEL, vocab_size=256, d_model=256, n_heads=8, n_kv_heads=4)
        seq = 4096
        print("\n| budget (ulimit -v per rank) | DP, 2 ranks, seq_len 4096 | ISP sp 2, 2 ranks, seq_len 4096 |")
        print("|---|---|---|")
        found = None
        for gib in (3.0, 2.5, 2.0, 1.75, 1.5, 1.25, 1.0, 0.875, 0.75):
            kib = int(gib * 1048576)
            d = run(a.build, tmp, f"dp-{gib}", {"strategy": "dp"}, 3, micro_batch=1, seq_len=seq, vm_kib=kib, model=small)
            s = run(a.build, tmp, f"sp-{gib}", {"strategy": "isp", "sp": 2}, 3, micro_batch=1, seq_len=seq,
                    vm_kib=kib, model=small)
            fmt = lambda r: (f"trains ({r['step']:.2f} s/step, peak RSS {mib(r['rss'])})" if r["code"] == 0
                             else f"fails: exit {r['code']} ({r['why'][:90]})")
            print(f"| {gib} GiB | {fmt(d)} | {fmt(s)} |")
            if d["code"] != 0 and s["code"] == 0:
                found = gib
            if d["code"] != 0 and s["code"] != 0:
                break
        print(f"\nbudget where ISP sp 2 trains and DP does not: {found} GiB" if found else
              "\nno budget separated DP from ISP sp 2")


if __name__ == "__main__":
    main()
