#!/usr/bin/env python3
"""ZeRO step time, 2 ranks on this machine, one thread each: weft's ZeRO
stages x overlap modes (and the parameter all-gather overlapped with forward)
vs weft's plain DP on the same model and batch, and PyTorch DDP +
ZeroRedundancyOptimizer (gloo) as the peer. Also the optimizer (and
gradient) bytes rank 0 holds. Runs without clipping (optim.grad_clip 0), so
the overlapped modes step shards before the last reduction (with clipping the
step waits for the global norm); one DP/ZeRO pair with clipping for contrast.
Prints markdown tables for docs/benchmarks/zero.md.

usage: zero_step_time.py BUILD_DIR [--steps 12]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = {"vocab_size": 2048, "d_model": 512, "n_layers": 4, "n_heads": 8, "n_kv_heads": 4,
         "max_seq_len": 128}
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_WAIT_POLICY="passive")


def weft(build, tmp, name, parallel, steps, clip=0.0):
    cfg = {"preset": "tiny", "model": MODEL,
           "train": {"steps": steps, "micro_batch": 4, "seq_len": 128, "log_every": 0,
                     "out_dir": os.path.join(tmp, name)},
           "optim": {"grad_clip": clip},
           "checkpoint": {"dir": os.path.join(tmp, name, "ckpt"), "resume": False},
           "metrics": {"port": 0}, "parallel": parallel}
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        json.dump(cfg, f)
    subprocess.run([os.path.join(build, "bin", "weft-run"), "-n", "2", path], check=True, env=ENV,
                   capture_output=True)
    with open(os.path.join(tmp, name, "summary.json")) as f:
        s = json.load(f)
    g = s["gradient_sync"]
    warm = slice(3, None)
    return {"step": statistics.median(s["step_seconds"][warm]),
            "comm": statistics.median(g["comm_seconds"][warm]),
            "exposed": statistics.median(g["exposed_seconds"][warm]),
            "overlap": g["overlap_ratio"], "params": s["num_params"],
            "opt_bytes": s["memory_bytes"]["optimizer"], "grad_bytes": s["memory_bytes"]["grad"],
            "loss": s["final_loss"]}, path


def torch_peer(build, cfg_path, steps, zero, clip):
    resolved = cfg_path + ".resolved.yaml"
    with open(resolved, "w") as f:
        f.write(subprocess.run([os.path.join(build, "bin", "weft-worker"), cfg_path, "--print-config"],
                               check=True, capture_output=True, text=True).stdout)
    args = [sys.executable, os.path.join(HERE, "torch_ddp_step.py"), "--config", resolved,
            "--steps", str(steps), "--clip", str(clip)] + (["--zero"] if zero else [])
    out = subprocess.run(args, check=True, capture_output=True, env=ENV, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["median_step_seconds"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--steps", type=int, default=12)
    a = ap.parse_args()
    base = {"bucket_cap_mb": 25, "first_bucket_mb": 1}
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        dp, dp_path = weft(a.build, tmp, "dp", base, a.steps)
        runs.append(("weft DP", dp))
        for stage in (1, 2):
            for overlap in ("none", "after_backward", "interleaved"):
                for gather in ((False, True) if overlap == "interleaved" else (False,)):
                    name = f"zero{stage}-{overlap}{'-gather' if gather else ''}"
                    p = dict(base, strategy="zero",
                             zero={"stage": stage, "overlap": overlap, "overlap_param_gather": gather})
                    runs.append((f"weft ZeRO-{stage} {overlap}{' + param gather overlap' if gather else ''}",
                                 weft(a.build, tmp, name, p, a.steps)[0]))
        dp_clip = weft(a.build, tmp, "dp-clip", base, a.steps, clip=1.0)[0]
        z_clip = weft(a.build, tmp, "zero1-clip", dict(base, strategy="zero", zero={"stage": 1}), a.steps,
                      clip=1.0)[0]
        torch_ddp = torch_peer(a.build, dp_path, a.steps, False, 0.0)
        torch_zero = torch_peer(a.build, dp_path, a.steps, True, 0.0)

    ms = lambda s: f"{s * 1e3:.0f} ms"  # noqa: E731
    mib = lambda b: f"{b / 2**20:.1f} MiB"  # noqa: E731
    print(f"model: {dp['params'] / 1e6:.1f} M parameters, 2 ranks x 4 x 128 tokens, 1 thread per rank, "
          f"bucket cap 25 MiB (first 1), no clipping\n")
    none1 = dict(runs)["weft ZeRO-1 none"]["step"]
    print("| run | step time | vs weft DP | vs ZeRO-1 none | comm | exposed | overlap | optimizer bytes/rank | grad bytes/rank |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| PyTorch DDP (gloo) | {ms(torch_ddp)} | {torch_ddp / dp['step']:.2f} | | | | | | |")
    print(f"| PyTorch DDP + ZeroRedundancyOptimizer (gloo) | {ms(torch_zero)} | {torch_zero / dp['step']:.2f} | | | | | | |")
    for label, r in runs:
        print(f"| {label} | {ms(r['step'])} | {r['step'] / dp['step']:.3f} | {r['step'] / none1:.3f} | {ms(r['comm'])} | "
              f"{ms(r['exposed'])} | {r['overlap']:.2f} | {mib(r['opt_bytes'])} | {mib(r['grad_bytes'])} |")
    print("\nWith clipping (optim.grad_clip 1.0; ZeRO-1 interleaved, whose step then waits for the global norm):\n")
    print("| run | step time | vs weft DP | exposed |")
    print("|---|---|---|---|")
    print(f"| weft DP | {ms(dp_clip['step'])} | 1.000 | {ms(dp_clip['exposed'])} |")
    print(f"| weft ZeRO-1 interleaved | {ms(z_clip['step'])} | {z_clip['step'] / dp_clip['step']:.3f} | {ms(z_clip['exposed'])} |")


if __name__ == "__main__":
    main()
