#!/usr/bin/env python3
"""Where a weft training step spends its GPU time: a whole-step profile.

usage (on the GPU machine, from the project root, after . .gpu/env.sh):
  python3 tests/bench/gpu/step_profile.py --bin .gpu/bin --out DIR
      [--preset gpt2-124m] [--mb 4] [--seq 1024] [--steps 12]

Trains the preset with device cuda, bf16, synthetic data for --steps steps
under Nsight Systems (CUDA trace) when nsys is installed, else under Nsight
Compute (one metric, kernel duration, over the kernels of the last steps).
Writes into --out: profile.md (kernels grouped by kind with their share of
the step, GPU busy time per step against the step's wall time, and the top
CUDA API calls by host time when nsys ran) and the raw CSV reports.
The busy/wall ratio says which lever comes first: well below 1, the GPU
waits on the host (launches, syncs: fewer syncs, CUDA graphs); near 1, the
kernels themselves (fusion, better kernels).
"""
import argparse
import csv
import glob
import io
import json
import os
import shutil
import statistics
import subprocess
import sys


def find_tool(name):
    path = shutil.which(name)
    if path:
        return path
    for pattern in (f"/usr/local/cuda/bin/{name}", f"/opt/nvidia/nsight-*/*/bin/{name}",
                    f"/opt/nvidia/nsight-*/bin/{name}", f"/usr/local/cuda/nsight-*/bin/{name}",
                    f"/usr/local/cuda/nsight-*/target-linux-x64/{name}"):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


# Kernel names -> the part of the step they belong to (first match wins).
KINDS = [
    ("attention (cuDNN)", ("cudnn", "fmha", "flash", "sdpa")),
    ("attention (SIMT)", ("attention",)),
    ("matmul (cuBLASLt)", ("gemm", "nvjet", "xmma", "cutlass", "sm90_", "cublas")),
    ("cross-entropy", ("cross_entropy", "crossentropy", "softmax", "ce_fwd", "ce_bwd", "ce_sum")),
    ("rmsnorm", ("rms",)),
    ("swiglu / activations", ("swiglu", "silu", "gelu")),
    ("rope", ("rope", "rotary")),
    ("embedding", ("embed", "gather", "scatter")),
    ("optimizer", ("adam", "clip", "norm", "scale")),
    ("casts / copies", ("cast", "copy", "convert", "fill", "memset", "zero")),
    ("reductions", ("reduce", "sum")),
]


def kind_of(name):
    low = name.lower()
    for kind, keys in KINDS:
        if any(k in low for k in keys):
            return kind
    return "other"


def run(cmd, log, env=None):
    with open(log, "w") as f:
        print("+", " ".join(cmd), flush=True)
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode


def read_csv_report(text):
    # nsys stats prints a header line per report before the CSV on older versions.
    lines = [l for l in text.splitlines() if l.count(",") >= 2]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def col(row, *names):
    for n in names:
        for k in row:
            if k.strip().lower() == n.lower():
                return row[k]
    raise KeyError(names)


def ncu_kernels(text):
    """(name, total ns, launches) per kernel from Nsight Compute's --csv log of
    gpu__time_duration.sum (its ==PROF== lines skipped; it prints values with
    thousands separators, "388,000", even with --print-units base)."""
    agg = {}
    for x in read_csv_report(text):
        if col(x, "Metric Name") != "gpu__time_duration.sum":
            continue
        name = col(x, "Kernel Name")
        t, n = agg.get(name, (0.0, 0))
        agg[name] = (t + float(col(x, "Metric Value").replace(",", "")), n + 1)
    return [(k, t, n) for k, (t, n) in agg.items()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/weft-profile")
    ap.add_argument("--preset", default="gpt2-124m")
    ap.add_argument("--mb", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--ncu-steps", type=int, default=3, help="steps of the run under ncu (it replays every kernel)")
    ap.add_argument("--tool", choices=["auto", "nsys", "ncu"], default="auto")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    out_dir = os.path.join(a.work, "run")
    cfg = os.path.join(a.work, "profile.yaml")
    with open(cfg, "w") as f:
        f.write(f"""preset: {a.preset}
device: cuda
train: {{steps: {a.steps}, micro_batch: {a.mb}, seq_len: {a.seq}, grad_accum: 1, log_every: 1,
        dtype: bf16, out_dir: {out_dir}}}
metrics: {{port: 0}}
""")
    worker = [os.path.join(a.bin, "weft-worker"), cfg, "--no-resume"]
    nsys, ncu = find_tool("nsys"), find_tool("ncu")
    tool = a.tool if a.tool != "auto" else ("nsys" if nsys else "ncu")
    print(f"profile: nsys={nsys} ncu={ncu}; using {tool}", flush=True)
    md = [f"# weft step profile: {a.preset}, mb {a.mb}, seq {a.seq}, {a.steps} steps, bf16 ({tool})", ""]

    # Wall time per step without a profiler attached (the reference).
    rc = run(worker, os.path.join(a.out, "plain.log"))
    if rc != 0:
        sys.exit(f"weft-worker exited {rc}: see plain.log")
    with open(os.path.join(out_dir, "summary.json")) as f:
        s = json.load(f)
    warm = min(3, a.steps - 1)
    step_ms = 1e3 * statistics.median(s["step_seconds"][warm:])
    md += [f"Step wall time without a profiler: {step_ms:.2f} ms (median of steps {warm + 1}-{a.steps}).", ""]
    shutil.rmtree(out_dir, ignore_errors=True)

    kernels = []  # (name, total_ns, calls)
    api = []
    if tool == "nsys":
        rep = os.path.join(a.work, "weft")
        rc = run([nsys, "profile", "-t", "cuda", "-s", "none", "--cpuctxsw", "none", "-o", rep, "--force-overwrite",
                  "true"] + worker, os.path.join(a.out, "nsys.log"))
        if rc != 0:
            sys.exit(f"nsys exited {rc}: see nsys.log")
        for report in ("cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum"):
            r = subprocess.run([nsys, "stats", "-q", "-r", report, "-f", "csv", rep + ".nsys-rep"],
                               capture_output=True, text=True)
            with open(os.path.join(a.out, report + ".csv"), "w") as f:
                f.write(r.stdout + r.stderr)
            rows = read_csv_report(r.stdout)
            if report == "cuda_gpu_kern_sum":
                kernels = [(col(x, "Name"), float(col(x, "Total Time (ns)")), int(col(x, "Instances")))
                           for x in rows]
            elif report == "cuda_api_sum":
                api = [(col(x, "Name"), float(col(x, "Total Time (ns)")), int(col(x, "Num Calls"))) for x in rows]
            else:
                kernels += [("[mem] " + col(x, "Operation"), float(col(x, "Total Time (ns)")),
                             int(col(x, "Count"))) for x in rows]
        per_step_div = a.steps  # whole run: init and checkpoint kernels are few next to the steps
    else:
        # Nsight Compute replays every kernel: profile a short run of its own.
        with open(cfg) as f:
            short = f.read().replace(f"steps: {a.steps},", f"steps: {a.ncu_steps},")
        with open(cfg, "w") as f:
            f.write(short)
        r = subprocess.run([ncu, "--metrics", "gpu__time_duration.sum", "--csv", "--print-units", "base",
                            "--launch-skip", "0", "--launch-count", "100000", "--log-file",
                            os.path.join(a.work, "ncu.csv")] + worker, capture_output=True, text=True)
        with open(os.path.join(a.out, "ncu.log"), "w") as f:
            f.write(r.stdout[-20000:] + r.stderr[-20000:])
        with open(os.path.join(a.work, "ncu.csv")) as f:
            kernels = ncu_kernels(f.read())
        shutil.copy(os.path.join(a.work, "ncu.csv"), os.path.join(a.out, "ncu.csv"))
        per_step_div = a.ncu_steps

    busy_ms = sum(t for _, t, _ in kernels) / 1e6 / per_step_div
    md += [f"GPU busy per step (kernels and copies, whole run / steps): {busy_ms:.2f} ms, "
           f"{100 * busy_ms / step_ms:.0f} % of the step's wall time.", ""]
    by_kind = {}
    for name, t, n in kernels:
        k = "memcpy/memset" if name.startswith("[mem]") else kind_of(name)
        bt, bn = by_kind.get(k, (0.0, 0))
        by_kind[k] = (bt + t, bn + n)
    md += ["| part | ms/step | % of step wall | launches/step |", "|---|---|---|---|"]
    for k, (t, n) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        ms = t / 1e6 / per_step_div
        md.append(f"| {k} | {ms:.2f} | {100 * ms / step_ms:.1f} | {n / per_step_div:.0f} |")
    md += ["", "Top kernels:", "", "| kernel | ms/step | calls/step | us/call |", "|---|---|---|---|"]
    for name, t, n in sorted(kernels, key=lambda x: -x[1])[:25]:
        md.append(f"| `{name[:90]}` | {t / 1e6 / per_step_div:.3f} | {n / per_step_div:.1f} | {t / 1e3 / max(n, 1):.1f} |")
    if api:
        md += ["", "CUDA API calls by host time:", "", "| call | ms/step | calls/step |", "|---|---|---|"]
        for name, t, n in sorted(api, key=lambda x: -x[1])[:15]:
            md.append(f"| `{name}` | {t / 1e6 / per_step_div:.3f} | {n / per_step_div:.1f} |")
    text = "\n".join(md) + "\n"
    with open(os.path.join(a.out, "profile.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
