#!/usr/bin/env python3
"""Single-process training throughput and peak memory: weft-worker vs the
same model in PyTorch, eager and torch.compile (the pinned venv of
scripts/python-env.sh), same thread count and batch, measured in one run.
Prints a markdown table for docs/benchmarks/single-process.md.

usage: train_throughput.py BUILD_DIR [--threads 2] [--only tiny] [--rounds 3]
                           [--no-compile] [--beside K] [--json FILE]

--beside K: the same bench while K other weft trainings (2-rank weft-run
jobs of the tiny preset, niced, restarted whenever they finish) run on the
same machine, as ranks sharing a node do. Every contestant runs under the
same load.
"""
import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# preset, steps, overrides for the benchmark (gpt2-124m uses micro-batch 1 so a
# step fits a 2-core machine's patience; same batch for both sides).
CASES = [
    ("tiny", 30, {}),
    ("gpt2-124m", 6, {"device": "cpu", "train": {"micro_batch": 1, "grad_accum": 1}}),
]


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return [x for x in flags if x.startswith(("avx", "fma", "amx"))]
    return []


@contextlib.contextmanager
def beside(build, k, tmp):
    """K niced 2-rank weft trainings, each restarted when it ends."""
    if k <= 0:
        yield
        return
    cfg = os.path.join(tmp, "beside.yaml")
    with open(cfg, "w") as f:
        json.dump({"preset": "tiny", "train": {"steps": 100000, "log_every": 0}, "metrics": {"port": 0},
                   "checkpoint": {"every": 0}}, f)
    script = ("while :; do nice -n 10 {run} -n 2 {cfg} --out {tmp}/beside-$1 --no-resume "
              ">/dev/null 2>&1; sleep 0.2; done").format(run=os.path.join(build, "bin", "weft-run"), cfg=cfg, tmp=tmp)
    # A process group of their own (to stop them), but the bench's session:
    # with the kernel's autogroup scheduling (CONFIG_SCHED_AUTOGROUP, on by
    # default) a new session is a new scheduling group whose share of the CPU
    # is the bench's own whatever its nice value.
    procs = [subprocess.Popen(["bash", "-c", script, "_", str(i)], process_group=0) for i in range(k)]
    time.sleep(3)
    try:
        yield
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, 15)
        for p in procs:
            p.wait()
        # The ranks stop gracefully (a last checkpoint) after their loop is
        # gone: wait until nothing of a group is left, then tmp can go.
        deadline = time.monotonic() + 60
        for p in procs:
            while time.monotonic() < deadline:
                try:
                    os.killpg(p.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.2)


def run_weft(worker, path, env, tmp, preset):
    subprocess.run([worker, path], env=env, check=True, capture_output=True)
    with open(os.path.join(tmp, preset, "summary.json")) as f:
        run = json.load(f)
    warm = run["step_seconds"][2:] if len(run["step_seconds"]) > 3 else run["step_seconds"][1:]
    return statistics.median(warm), run


def run_torch(rpath, steps, threads, env, compiled):
    cmd = [sys.executable, os.path.join(HERE, "torch_train_step.py"), "--config", rpath,
           "--steps", str(steps), "--threads", str(threads)] + (["--compile"] if compiled else [])
    t = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if t.returncode != 0:
        return None, t.stderr.strip().splitlines()[-1] if t.stderr.strip() else f"exit {t.returncode}"
    return json.loads(t.stdout.strip().splitlines()[-1]), None


def run_case(build, preset, steps, over, threads, tmp, rounds, compiled):
    # Every side gets passive OpenMP waits (weft-worker sets it for itself
    # anyway): with spinning waits PyTorch ran 3-5x slower here.
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               OMP_WAIT_POLICY="passive")
    cfg = {"preset": preset, **over}
    cfg.setdefault("train", {}).update({"steps": steps, "log_every": 0, "out_dir": os.path.join(tmp, preset)})
    cfg["checkpoint"] = {"dir": os.path.join(tmp, preset, "ckpt"), "resume": False, "every": 0}
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
    # Alternate the contestants and keep each one's best round: on a shared
    # machine, other load only ever slows a run down.
    best = {"weft": None, "eager": None, "compile": None}
    rounds_seen = {"weft": [], "eager": [], "compile": []}
    compile_error = None
    for _ in range(rounds):
        step, s = run_weft(worker, path, env, tmp, preset)
        rounds_seen["weft"].append(step)
        if best["weft"] is None or step < best["weft"][0]:
            best["weft"] = (step, s)
        for name in ("eager", "compile"):
            if name == "compile" and (not compiled or compile_error):
                continue
            tr, err = run_torch(rpath, steps, threads, env, name == "compile")
            if tr is None:
                if name == "compile":
                    compile_error = err
                    continue
                raise SystemExit(f"torch eager failed: {err}")
            rounds_seen[name].append(tr["median_step_seconds"])
            if best[name] is None or tr["median_step_seconds"] < best[name][0]:
                best[name] = (tr["median_step_seconds"], tr)
    s = best["weft"][1]
    tokens = s["tokens"] / max(1, s["steps_done"] - s["start_step"])
    out = {
        "preset": preset, "params": s["num_params"], "tokens_per_step": int(tokens),
        "weft_tok_s": tokens / best["weft"][0], "weft_rss": s["peak_rss_bytes"], "phases": s["phase_seconds"],
        "rounds_step_seconds": rounds_seen, "compile_error": compile_error,
    }
    for name in ("eager", "compile"):
        if best[name]:
            tr = best[name][1]
            out[f"{name}_tok_s"] = tr["tokens_per_step"] / tr["median_step_seconds"]
            out[f"{name}_rss"] = tr["peak_rss_bytes"]
            out[f"{name}_first_step_s"] = tr["first_step_seconds"]
            out["torch"] = tr["torch"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--beside", type=int, default=0, help="other 2-rank weft trainings running meanwhile")
    ap.add_argument("--json", help="write the raw results here")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        with beside(a.build, a.beside, tmp):
            for preset, steps, over in CASES:
                if a.only and preset != a.only:
                    continue
                r = run_case(a.build, preset, steps, over, a.threads, tmp, a.rounds, not a.no_compile)
                rows.append(r)
                print(json.dumps(r), file=sys.stderr)
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    meta = {"commit": commit, "cpu": cpu_model(), "cpu_flags": cpu_flags(), "cores": os.cpu_count(),
            "threads": a.threads, "rounds": a.rounds, "beside": a.beside,
            "torch": next((r.get("torch") for r in rows if r.get("torch")), None)}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    cond = "quiet" if a.beside == 0 else f"beside {a.beside} niced 2-rank weft runs"
    print(f"commit {commit}, {meta['cpu']} ({meta['cores']} cores; {' '.join(meta['cpu_flags'])}), "
          f"torch {meta['torch']}, {a.threads} threads, best of {a.rounds} alternating rounds, {cond}\n")
    print("| preset | load | weft tok/s | eager tok/s | weft/eager | compile tok/s | weft/compile "
          "| weft RSS | eager RSS | compile RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    mib = 1 << 20
    for r in rows:
        comp = (f"{r['compile_tok_s']:.0f} | {r['weft_tok_s']/r['compile_tok_s']:.2f}"
                if "compile_tok_s" in r else "did not compile | -")
        crss = f"{r['compile_rss']/mib:.0f} MiB" if "compile_rss" in r else "-"
        print(f"| {r['preset']} | {cond} | {r['weft_tok_s']:.0f} | {r['eager_tok_s']:.0f} | "
              f"{r['weft_tok_s']/r['eager_tok_s']:.2f} | {comp} | {r['weft_rss']/mib:.0f} MiB | "
              f"{r['eager_rss']/mib:.0f} MiB | {crss} |")
    for r in rows:
        p = r["phases"]
        tot = sum(p.values())
        print(f"\n{r['preset']} weft time by phase: " +
              ", ".join(f"{k} {100*v/tot:.0f}%" for k, v in p.items()))
        if r.get("compile_error"):
            print(f"\n{r['preset']} torch.compile failed: {r['compile_error']}")


if __name__ == "__main__":
    main()
