#!/usr/bin/env python3
"""Single-process training throughput and peak memory: weft-worker vs the
same model in PyTorch (Debian python3-torch), same thread count and batch,
measured in one run. Prints a markdown table for docs/benchmarks/single-process.md.

usage: train_throughput.py BUILD_DIR [--threads 2] [--only tiny] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# preset, steps, overrides for the benchmark (gpt2-124m uses micro-batch 1 so a
# step fits a 2-core machine's patience; same batch for both sides).
CASES = [
    ("tiny", 30, {}),
    ("gpt2-124m", 5, {"device": "cpu", "train": {"micro_batch": 1, "grad_accum": 1}}),
]


def run_case(build, preset, steps, over, threads, tmp, rounds):
    # Both sides get passive OpenMP waits (weft-worker sets it for itself
    # anyway): with spinning waits PyTorch ran 3-5x slower here.
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               OMP_WAIT_POLICY="passive")
    cfg = {"preset": preset, **over}
    cfg.setdefault("train", {}).update({"steps": steps, "log_every": 0, "out_dir": os.path.join(tmp, preset)})
    cfg["checkpoint"] = {"dir": os.path.join(tmp, preset, "ckpt"), "resume": False}
    cfg["metrics"] = {"port": 0}
    path = os.path.join(tmp, f"{preset}.yaml")
    with open(path, "w") as f:
        json.dump(cfg, f)  # JSON is YAML
    worker = os.path.join(build, "bin", "weft-worker")
    resolved = subprocess.run([worker, path, "--print-config"], env=env, check=True,
                              capture_output=True, text=True).stdout
    rpath = os.path.join(tmp, f"{preset}.resolved.yaml")
    with open(rpath, "w") as f:
        f.write(resolved)
    # Alternate weft and PyTorch and keep each side's best round: on a shared
    # machine, other load only ever slows a run down.
    weft_step, torch_step, s, torch = float("inf"), float("inf"), None, None
    for _ in range(rounds):
        subprocess.run([worker, path], env=env, check=True, capture_output=True)
        with open(os.path.join(tmp, preset, "summary.json")) as f:
            run = json.load(f)
        warm = run["step_seconds"][2:] if len(run["step_seconds"]) > 3 else run["step_seconds"][1:]
        if statistics.median(warm) < weft_step:
            weft_step, s = statistics.median(warm), run
        t = subprocess.run([sys.executable, os.path.join(HERE, "torch_train_step.py"), "--config", rpath,
                            "--steps", str(steps), "--threads", str(threads)],
                           env=env, check=True, capture_output=True, text=True)
        tr = json.loads(t.stdout.strip().splitlines()[-1])
        if tr["median_step_seconds"] < torch_step:
            torch_step, torch = tr["median_step_seconds"], tr
    tokens = s["tokens"] / max(1, s["steps_done"] - s["start_step"])
    phases = s["phase_seconds"]
    return {
        "preset": preset, "params": s["num_params"], "tokens_per_step": int(tokens),
        "weft_tok_s": tokens / weft_step, "torch_tok_s": torch["tokens_per_step"] / torch["median_step_seconds"],
        "weft_rss": s["peak_rss_bytes"], "torch_rss": torch["peak_rss_bytes"], "phases": phases,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset, steps, over in CASES:
            if a.only and preset != a.only:
                continue
            r = run_case(a.build, preset, steps, over, a.threads, tmp, a.rounds)
            rows.append(r)
            print(json.dumps(r), file=sys.stderr)
    print(f"| preset | params | tokens/step | weft tok/s | PyTorch tok/s | ratio | weft peak RSS | PyTorch peak RSS | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        mib = 1 << 20
        print(f"| {r['preset']} | {r['params']/1e6:.2f} M | {r['tokens_per_step']} | {r['weft_tok_s']:.0f} | "
              f"{r['torch_tok_s']:.0f} | {r['weft_tok_s']/r['torch_tok_s']:.2f} | {r['weft_rss']/mib:.0f} MiB | "
              f"{r['torch_rss']/mib:.0f} MiB | {r['weft_rss']/r['torch_rss']:.2f} |")
    for r in rows:
        p = r["phases"]
        tot = sum(p.values())
        print(f"\n{r['preset']} weft time by phase: " +
              ", ".join(f"{k} {100*v/tot:.0f}%" for k, v in p.items()))


if __name__ == "__main__":
    main()
