#!/usr/bin/env python3
"""Data-parallel step time, 2 ranks on this machine, one thread each:
weft (weft-run, Gloo) vs PyTorch DDP (gloo, bucket_cap_mb=25) on the same
model and batch; weft at its defaults (bucket_cap_mb auto, comm.lanes 2),
at the old default cap of 25 MiB, and with comm.lanes 1 (one FIFO per group); weft with overlap on vs the sync-after-backward
baseline; and a bucket-cap sweep. Prints the load (uptime) and markdown
tables for docs/benchmarks/data-parallel.md.

With --model gpt2-124m the model is GPT-2 small's shape (124 M parameters,
tied embeddings, vocab 50304) at the same per-rank batch; --quick runs only
DDP, weft's defaults and weft at 25 MiB (a step of the 124 M model takes
seconds on one core per rank).

With --rounds N (default 3) weft's defaults, DDP eager and DDP with
torch.compile alternate N times and each keeps its best round (other load
only slows a run down); the other weft runs are measured once.

usage: dp_step_time.py BUILD_DIR [--steps 12] [--model 13.7m|gpt2-124m] [--quick] [--rounds 3]
                       [--no-compile]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {
    "13.7m": {"vocab_size": 2048, "d_model": 512, "n_layers": 4, "n_heads": 8, "n_kv_heads": 4,
              "max_seq_len": 128},
    # GPT-2 small's shape as the gpt2-124m preset has it (weft's Llama blocks).
    "gpt2-124m": {"vocab_size": 50304, "d_model": 768, "n_layers": 12, "n_heads": 12, "n_kv_heads": 12,
                  "ffn_hidden": 2048, "max_seq_len": 128, "tie_embeddings": True},
}
MODEL = MODELS["13.7m"]


def weft(build, tmp, name, parallel, steps, comm=None):
    cfg = {"preset": "tiny", "model": MODEL, "comm": comm or {},
           "train": {"steps": steps, "micro_batch": 4, "seq_len": 128, "log_every": 0,
                     "out_dir": os.path.join(tmp, name)},
           "checkpoint": {"dir": os.path.join(tmp, name, "ckpt"), "resume": False},
           "metrics": {"port": 0}, "parallel": parallel}
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    subprocess.run([os.path.join(build, "bin", "weft-run"), "-n", "2", path], check=True, env=env,
                   capture_output=True)
    with open(os.path.join(tmp, name, "summary.json")) as f:
        s = json.load(f)
    g = s["gradient_sync"]
    warm = slice(3, None)
    return {"step": statistics.median(s["step_seconds"][warm]),
            "comm": statistics.median(g["comm_seconds"][warm]),
            "exposed": statistics.median(g["exposed_seconds"][warm]),
            # Overlap of the warm steps (the run-wide ratio includes warm-up).
            "overlap": statistics.median(1 - e / c if c > 0 else 0.0
                                         for e, c in zip(g["exposed_seconds"][warm], g["comm_seconds"][warm])),
            "buckets": g["bucket_count"], "cap": g["bucket_cap_mb"], "params": s["num_params"]}, path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--model", choices=sorted(MODELS), default="13.7m")
    ap.add_argument("--quick", action="store_true", help="only DDP, weft defaults and weft at 25 MiB")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of weft, DDP eager and compiled")
    ap.add_argument("--no-compile", action="store_true", help="no torch.compile'd DDP")
    a = ap.parse_args()
    global MODEL
    MODEL = MODELS[a.model]
    load_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        dflt, cfg_path = weft(a.build, tmp, "defaults", {}, a.steps)
        resolved = os.path.join(tmp, "resolved.yaml")
        with open(resolved, "w") as f:
            f.write(subprocess.run([os.path.join(a.build, "bin", "weft-worker"), cfg_path, "--print-config"],
                                   check=True, capture_output=True, text=True).stdout)
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_WAIT_POLICY="passive")

        def torch_ddp(compiled):
            t = subprocess.run([sys.executable, os.path.join(HERE, "torch_ddp_step.py"), "--config", resolved,
                                "--steps", str(a.steps)] + (["--compile"] if compiled else []),
                               capture_output=True, env=env, text=True)
            if t.returncode != 0:
                if not compiled:
                    raise SystemExit(f"torch DDP failed: {t.stderr.strip()[-2000:]}")
                return None, (t.stderr.strip().splitlines() or [f"exit {t.returncode}"])[-1]
            return json.loads(t.stdout.strip().splitlines()[-1]), None

        rounds = {"weft": [dflt["step"]], "eager": [], "compile": []}
        ddp = ddpc = compile_error = None
        for r in range(a.rounds):
            if r > 0:
                again, _ = weft(a.build, tmp, "defaults", {}, a.steps)
                rounds["weft"].append(again["step"])
                if again["step"] < dflt["step"]:
                    dflt = again
            e, _ = torch_ddp(False)
            rounds["eager"].append(e["median_step_seconds"])
            if ddp is None or e["median_step_seconds"] < ddp["median_step_seconds"]:
                ddp = e
            if not a.no_compile and compile_error is None:
                c, compile_error = torch_ddp(True)
                if c is not None:
                    rounds["compile"].append(c["median_step_seconds"])
                    if ddpc is None or c["median_step_seconds"] < ddpc["median_step_seconds"]:
                        ddpc = c
        old25, _ = weft(a.build, tmp, "old-default", {"bucket_cap_mb": 25}, a.steps)
        if not a.quick:
            lanes1, _ = weft(a.build, tmp, "lanes1", {}, a.steps, {"lanes": 1})
            on, _ = weft(a.build, tmp, "overlap", {"bucket_cap_mb": 25, "first_bucket_mb": 1}, a.steps)
            off, _ = weft(a.build, tmp, "no-overlap", {"bucket_cap_mb": 25, "first_bucket_mb": 1, "overlap": False},
                          a.steps)
            sweep = [(cap, weft(a.build, tmp, f"cap{cap}", {"bucket_cap_mb": cap}, a.steps)[0])
                     for cap in (1, 4, 16, 64)]

    load_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    ms = lambda s: f"{s * 1e3:.0f} ms"  # noqa: E731
    print(f"load before: {load_before}\nload after: {load_after}\n")
    print(f"model: {dflt['params'] / 1e6:.1f} M parameters ({dflt['params'] * 4 / 2**20:.0f} MiB of fp32 gradients), "
          f"2 ranks x 4 x 128 tokens, 1 thread per rank, {a.steps} steps (median after 3)\n")
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    import torch  # the version only; the peers ran in their own processes
    print(f"commit {commit}, torch {torch.__version__}, best of {a.rounds} alternating rounds "
          f"(weft defaults, DDP eager, DDP compiled); step seconds per round: "
          + ", ".join(f"{k} [{', '.join(f'{x:.3f}' for x in v)}]" for k, v in rounds.items() if v) + "\n")
    print("| run | step time | ratio to DDP | comm | exposed | overlap ratio | buckets |")
    print("|---|---|---|---|---|---|---|")
    print(f"| PyTorch DDP (gloo, bucket_cap_mb=25) | {ms(ddp['median_step_seconds'])} | 1.00 | | | | |")
    if ddpc is not None:
        print(f"| PyTorch DDP + torch.compile | {ms(ddpc['median_step_seconds'])} | "
              f"{ddpc['median_step_seconds'] / ddp['median_step_seconds']:.2f} | | | | |")
    elif not a.no_compile:
        print(f"| PyTorch DDP + torch.compile | did not compile: {compile_error} | | | | | |")
    rows = [(f"weft DP, defaults (bucket_cap_mb auto = {dflt['cap']:g} MiB, comm.lanes 2)", dflt),
            ("weft DP, cap 25 (the default before auto)", old25)]
    if not a.quick:
        rows += [("weft DP, defaults but comm.lanes 1", lanes1),
                 ("weft DP, cap 25, first 1", on), ("weft DP, sync after backward", off)]
    for label, r in rows:
        print(f"| {label} | {ms(r['step'])} | {r['step'] / ddp['median_step_seconds']:.2f} | {ms(r['comm'])} | "
              f"{ms(r['exposed'])} | {r['overlap']:.2f} | {r['buckets']} |")
    if a.quick:
        return
    print("\n| bucket cap (MiB) | buckets | step time | comm | exposed | overlap ratio |")
    print("|---|---|---|---|---|---|")
    for cap, r in sweep:
        print(f"| {cap} | {r['buckets']} | {ms(r['step'])} | {ms(r['comm'])} | {ms(r['exposed'])} | {r['overlap']:.2f} |")


if __name__ == "__main__":
    main()
