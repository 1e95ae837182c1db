#!/usr/bin/env python3
"""weft against PyTorch on one GPU, in one run: the GPU speed harness.

usage (on the GPU machine, from the project root, after . .gpu/env.sh; the
driver tests/gpu/gpu_run.py runs it with the right environment):
  python3 tests/bench/gpu/speed.py --bin .gpu/bin --out LOGDIR [--json PATH]
      [--configs llama-1b-mb4,gpt2-124m-mb4,gpt2-124m-mb16] [--contestants weft,compile,compile-cudnn,eager]
      [--repeats 3] [--build-info .gpu/build-info.json] [--info JSON]
      (contestants weft-whole: weft with whole logits, train.logits_chunk_mb off;
       weft-kept: weft keeping every activation, train.recompute none)
      [--deadline SECONDS] [--no-agreement]

For each config the contestants train the same Llama from the same initial
weights on the same batches, bf16 with f32 master weights, AdamW (constant lr
3e-4, betas 0.9/0.95, weight decay 0.1 on the matrices but the embedding,
clip 1.0), one micro-batch per step:

- weft: weft-worker --init-from the model PyTorch saved (transformers'
  save_pretrained, safetensors), device cuda, train.dtype bf16;
- eager: transformers' LlamaForCausalLM, attn_implementation sdpa, f32
  parameters under torch.autocast(bf16), fused AdamW;
- compile: the same, with the forward and the loss under torch.compile;
- compile-cudnn: compile with SDPA pinned to cuDNN attention (weft's
  attention library on the GPU), so the attention kernel is not the difference.

Data: an llm.c token shard of a random Markov chain over the first
DATA_VOCAB token ids (branching 4, entropy floor ln 4 = 1.386 nats): the
loss falls from ln V as the model learns which ids occur, so it moves from
the first steps (over the whole vocabulary it sits at ln V for tens of
steps, where any two runs agree whatever their batches). weft reads it as
data.source: shards; PyTorch trains on the very batches weft trains on, in
weft's order (weft-reference-dump --batches-only writes them).

Loss agreement (once per config, before the timed rounds, untimed): weft and
eager train AGREE_STEPS steps at AGREE_LR on the same batches from the same
weights, and
every step's loss must agree within LOSS_TOL (relative, bf16's bound,
docs/cuda.md). The check carries its own negative control: the same
comparison with eager's losses shifted by one step (a batch shift) must
FAIL; where it would pass, the losses do not move enough to tell batches
apart and the agreement fails as "not discriminating".

Timing: every contestant's step ends when the device has finished it (PyTorch
synchronises before and after each step; weft's trainer waits for its compute
stream at the end of each step), ms/step is a run's median over the steps after
the warm-up (which includes torch.compile's compilation), and each contestant
runs --repeats times, alternating with the others (round r runs every
contestant once), giving min/median/max over the runs' medians; ratios are of
medians. Which SDPA kernel PyTorch ran is read from a profile of one warm-up
step and recorded.

Figures per contestant: ms/step, tokens/s, peak GPU memory of the process
(NVML, polled every 20 ms) and each allocator's own peaks (PyTorch's
max_memory_allocated / max_memory_reserved, weft's caching allocator's from
summary.json). MFU = tokens/s x (6 N + 12 L d T) / peak, N every parameter
(tied embeddings once) and, in the second figure, N without the input
embedding (a lookup, no matmul; the same N when it is tied to the LM head),
against the bf16 matmul peak measured in the same run (8192^3 torch.mm) and
against the H100's 989 TFLOP/s. Writes speed.json (versions, weft commit from
--build-info, every run's figures) and speed.md into --out, and prints the
table. Rounds go across configs (round r runs every config's contestants
once, the first config first: the 1B by default), so a cut run still has
each config measured. --deadline stops starting new measurements after that
many seconds (device time is scarce: a partial table beats none); the JSON
then says which were not run. The exit code is 1 when a contestant failed,
the loss agreement failed or weft did not run cuDNN attention, else 0.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

MODELS = {
    # GPT-2 small as a Llama (weft's gpt2-124m preset): tied embeddings.
    "gpt2-124m": dict(vocab=50304, d=768, layers=12, heads=12, kv_heads=12, ffn=2048, tie=True),
    # ~1B Llama (TinyLlama's shape with 16 layers and GPT-2's vocabulary).
    "llama-1b": dict(vocab=50304, d=2048, layers=16, heads=16, kv_heads=4, ffn=5632, tie=False),
}
CONFIGS = {
    "llama-1b-mb4": dict(model="llama-1b", mb=4, seq=2048, warmup=3, steps=8),
    "gpt2-124m-mb4": dict(model="gpt2-124m", mb=4, seq=1024, warmup=5, steps=25),
    "gpt2-124m-mb16": dict(model="gpt2-124m", mb=16, seq=1024, warmup=4, steps=12),
}
LR, BETAS, EPS, WD, CLIP = 3e-4, (0.9, 0.95), 1e-8, 0.1, 1.0
LOSS_TOL = 1e-2
AGREE_STEPS = 12
AGREE_LR = 1e-3  # the agreement's runs only: the loss falls a few % a step, so a batch shift shows
DATA_VOCAB = 1024
TORCH_MODES = ("eager", "compile", "compile-cudnn", "eager-cudnn")
H100_PEAK = 989e12
SHARD_TOKENS = 1 << 22


def num_params(m):
    d, hd = m["d"], m["d"] // m["heads"]
    block = d * d * 2 + 2 * d * m["kv_heads"] * hd + 3 * d * m["ffn"] + 2 * d
    emb = m["vocab"] * d * (1 if m["tie"] else 2)
    return m["layers"] * block + emb + d


def flops_per_token(m, seq, input_embedding=True):
    n = num_params(m)
    if not input_embedding and not m["tie"]:
        n -= m["vocab"] * m["d"]  # a lookup: no matmul FLOPs
    return 6 * n + 12 * m["layers"] * m["d"] * seq


# ---------------------------------------------------------------- data


def write_shard(path, vocab, seed=1234, branching=4):
    """A Markov chain over token ids [0, vocab) (the model's vocabulary may be larger)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    succ = rng.integers(0, vocab, size=(vocab, branching), dtype=np.int64)
    choice = rng.integers(0, branching, size=SHARD_TOKENS)
    toks = np.empty(SHARD_TOKENS, dtype=np.int64)
    toks[0] = 0
    cur = 0
    for i in range(1, SHARD_TOKENS):  # a Markov chain is sequential; ~2 s
        cur = succ[cur, choice[i]]
        toks[i] = cur
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, SHARD_TOKENS)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.astype(np.uint16).tobytes())


# ---------------------------------------------------------------- GPU memory


class PeakMemory:
    """Peak GPU memory of one process, polled through NVML: the process's own
    figure, or where NVML cannot see the process (another pid namespace) the
    device's used memory above what it was at the start."""

    def __init__(self, pid):
        self.pid, self.peak, self.device_peak, self._stop = pid, 0, 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self):
        try:
            import pynvml
            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception as e:  # noqa: BLE001 - no NVML: report 0
            print(f"speed: no NVML ({e}); peak memory not polled", flush=True)
            return
        base = pynvml.nvmlDeviceGetMemoryInfo(h).used
        while not self._stop.is_set():
            try:
                self.device_peak = max(self.device_peak, pynvml.nvmlDeviceGetMemoryInfo(h).used - base)
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                    if p.pid == self.pid and p.usedGpuMemory:
                        self.peak = max(self.peak, p.usedGpuMemory)
            except pynvml.NVMLError:
                pass
            self._stop.wait(0.02)

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.peak or self.device_peak


def run_measured(cmd, log, env=None, timeout=None):
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
        mem = PeakMemory(p.pid)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
            with open(log, "a") as g:
                g.write(f"\nspeed: killed after {timeout} s\n")
        return rc, mem.stop()


# ---------------------------------------------------------------- contestants


def make_model_dir(m, seq, path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=m["vocab"], hidden_size=m["d"], intermediate_size=m["ffn"],
                      num_hidden_layers=m["layers"], num_attention_heads=m["heads"],
                      num_key_value_heads=m["kv_heads"], max_position_embeddings=seq,
                      rms_norm_eps=1e-5, tie_word_embeddings=m["tie"], initializer_range=0.02)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    model.save_pretrained(path)
    del model
    torch.cuda.empty_cache()


def weft_config(c, shard, steps, out_dir, train_extra="", lr=LR):
    # No checkpoint: a timed run's final one would cost seconds (the 1B's
    # weights and moments are ~12 GB) and nobody reads it.
    return f"""device: cuda
train: {{steps: {steps}, micro_batch: {c['mb']}, seq_len: {c['seq']}, grad_accum: 1, log_every: 1,
        dtype: bf16, out_dir: {out_dir}{train_extra}}}
data: {{source: shards, shards: "{shard}"}}
optim: {{lr: {lr}, warmup_steps: 0, min_lr_ratio: 1.0, beta1: {BETAS[0]}, beta2: {BETAS[1]}, eps: {EPS},
        weight_decay: {WD}, grad_clip: {CLIP}}}
checkpoint: {{save: false, resume: false}}
metrics: {{port: 0}}
"""


def export_batches(args, name, c, model_dir, shard):
    """The batches weft trains on, in its order, for PyTorch to train on."""
    steps = max(c["warmup"] + c["steps"], AGREE_STEPS + 1)
    out = os.path.join(args.work, f"{name}-batches")
    path = os.path.join(out, "batches.safetensors")
    if os.path.exists(path):
        return path
    cfg = os.path.join(args.work, f"{name}-batches.yaml")
    with open(cfg, "w") as f:
        f.write(weft_config(c, shard, steps, out).replace("device: cuda", "device: cpu"))
    subprocess.run([os.path.join(args.bin, "weft-reference-dump"), "--config", cfg, "--init-from", model_dir,
                    "--batches", str(steps), "--batches-only", "--out", out], check=True)
    return path


# weft's contestants: the train fields each sets beside the default config.
WEFT_VARIANTS = {"weft": "", "weft-whole": ", logits_chunk_mb: 1000000", "weft-kept": ", recompute: none"}


def weft_contestant(args, name, c, model_dir, shard, work, who="weft", rep=0, steps=None, lr=LR):
    """weft as configured by default; who "weft-whole" keeps the logits whole
    (train.logits_chunk_mb larger than any micro-batch's), the default before
    chunked logits, and "weft-kept" keeps every activation (train.recompute
    none), the default before pointwise recompute: each pair with "weft"
    measures one memory lever's memory and speed."""
    steps = steps or c["warmup"] + c["steps"]
    cfg = os.path.join(work, f"{name}-{who}.yaml")
    out_dir = os.path.join(work, f"{name}-{who}")
    chunk = WEFT_VARIANTS[who]
    with open(cfg, "w") as f:
        f.write(weft_config(c, shard, steps, out_dir, chunk, lr))
    log = os.path.join(args.out, f"{name}-{who}-{rep}.log")
    shutil.rmtree(out_dir, ignore_errors=True)  # a checkpoint left by an earlier run would be resumed
    # cuDNN attention or nothing: a run that fell back to weft's SIMT kernels
    # (cuDNN not on the library path) would be timed as weft's speed.
    env = dict(os.environ, WEFT_ATTENTION=os.environ.get("WEFT_ATTENTION", "cudnn"))
    rc, peak = run_measured([os.path.join(args.bin, "weft-worker"), cfg, "--init-from", model_dir, "--no-resume"],
                            log, env=env, timeout=args.step_timeout)
    if rc != 0:
        return {"error": f"weft-worker exited {rc} (see {os.path.basename(log)})"}
    with open(os.path.join(out_dir, "summary.json")) as f:
        s = json.load(f)
    timed = s["step_seconds"][c["warmup"]:]
    with open(log) as f:  # "attention: cudnn (cuDNN 9.19.0 ...)"
        attention = next((l.split("attention: ", 1)[1].strip() for l in f if "attention: " in l), "?")
    if env["WEFT_ATTENTION"] == "cudnn" and not attention.startswith("cudnn"):
        return {"error": f"weft ran attention '{attention}', not cudnn (see {os.path.basename(log)})"}
    mem = s.get("memory_bytes", {})
    return {"step_ms": 1e3 * statistics.median(timed), "step_ms_all": [1e3 * x for x in timed], "peak_bytes": peak,
            "alloc_peak_in_use": mem.get("device_peak_in_use"), "alloc_peak_held": mem.get("device_peak_held"),
            "loss": statistics.mean(s["losses"][-5:]), "losses": s["losses"], "attention": attention}


def torch_contestant(args, name, c, mode, model_dir, batches, rep=0, steps=None, lr=LR):
    log = os.path.join(args.out, f"{name}-{mode}-{rep}.log")
    res = os.path.join(args.work, f"{name}-{mode}.json")
    warmup, timed = (c["warmup"], c["steps"]) if steps is None else (0, steps)
    cmd = [sys.executable, os.path.abspath(__file__), "torch-worker", "--mode", mode, "--model-dir", model_dir,
           "--batches", batches, "--mb", str(c["mb"]), "--seq", str(c["seq"]), "--warmup", str(warmup),
           "--steps", str(timed), "--lr", str(lr), "--result", res]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    rc, peak = run_measured(cmd, log, env=env, timeout=args.step_timeout)
    if rc != 0:
        return {"error": f"torch {mode} exited {rc} (see {os.path.basename(log)})"}
    with open(res) as f:
        r = json.load(f)
    r["peak_bytes"] = peak
    return r


def torch_worker(a):
    """One PyTorch contestant in its own process (clean memory, own NVML pid)."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    model = AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32,
                                                 attn_implementation="sdpa").cuda().train()
    V = model.config.vocab_size
    decay = [p for n, p in model.named_parameters() if p.dim() > 1 and "embed" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.dim() > 1 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=BETAS, eps=EPS, fused=True)
    params = [p for p in model.parameters()]

    def fwd_loss(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().view(-1, V), y.reshape(-1))

    loss_fn = torch.compile(fwd_loss) if a.mode.startswith("compile") else fwd_loss
    from safetensors.torch import load_file
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import contextlib
    batches = load_file(a.batches)  # weft's batches, in weft's order
    pinned = sdpa_kernel([SDPBackend.CUDNN_ATTENTION]) if a.mode.endswith("cudnn") else contextlib.nullcontext()
    times, losses, sdpa = [], [], "?"
    with pinned:
        for i in range(a.warmup + a.steps):
            x = batches[f"inputs.{i}.0"].long()
            y = batches[f"targets.{i}.0"].long()
            profile = i == 1  # a warm-up step: which SDPA kernel ran
            prof = (torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) if profile
                    else contextlib.nullcontext())
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with prof:
                x, y = x.cuda(non_blocking=False), y.cuda(non_blocking=False)
                loss = loss_fn(x, y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, CLIP)
                opt.step()
                opt.zero_grad(set_to_none=True)
                losses.append(loss.item())
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            if profile:
                names = {e.name for e in prof.events()}
                hits = sorted({k for n in names for k in ("cudnn", "flash", "efficient", "fmha", "math")
                               if k in n.lower() and ("attention" in n.lower() or "fmha" in n.lower() or "sdpa" in n.lower())})
                sdpa = ",".join(hits) or "unknown"
            print(f"step {i + 1}: loss {losses[-1]:.4f} {1e3 * times[-1]:.1f} ms", flush=True)
    with open(a.result, "w") as f:
        json.dump({"step_ms": 1e3 * statistics.median(times[a.warmup:]), "step_ms_all": [1e3 * t for t in times[a.warmup:]],
                   "loss": statistics.mean(losses[-5:]), "losses": losses, "sdpa": sdpa,
                   "alloc_peak_in_use": torch.cuda.max_memory_allocated(),
                   "alloc_peak_held": torch.cuda.max_memory_reserved()}, f)


# ---------------------------------------------------------------- orchestration


def matmul_peak():
    import torch
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    flops = 2 * n ** 3 * reps / (time.perf_counter() - t0)
    del a, b
    torch.cuda.empty_cache()
    return flops


def versions():
    import torch
    import transformers
    v = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "transformers": transformers.__version__,
         "cudnn": torch.backends.cudnn.version(), "device": torch.cuda.get_device_name(0)}
    try:
        v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # noqa: BLE001 - a build without NCCL
        pass
    try:
        v["nvcc"] = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    except (OSError, IndexError):
        pass
    try:
        v["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                     capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    return v


def summarize(r):
    """min/median/max over the runs' medians; the last run's other figures."""
    ok = [x for x in r["runs"] if "error" not in x]
    if not ok:
        return dict(r, error=r["runs"][-1]["error"])
    ms = [x["step_ms"] for x in ok]
    last = ok[-1]
    out = {k: v for k, v in last.items() if k not in ("step_ms", "step_ms_all")}
    out.update(runs=r["runs"], step_ms=statistics.median(ms), step_ms_min=min(ms), step_ms_max=max(ms),
               peak_bytes=max(x.get("peak_bytes") or 0 for x in ok))
    return out


def max_rel_diff(a, b):
    """Largest relative difference of two series over their common length (inf when empty)."""
    n = min(len(a), len(b))
    return max((abs(x - y) / abs(y) for x, y in zip(a[:n], b[:n])), default=float("inf"))


def loss_agreement(weft_losses, eager_losses, tol=LOSS_TOL):
    """weft's and eager's per-step losses on the same batches from the same
    weights, with its negative control: eager's losses one step later (the
    batch shift) must not agree, or the window cannot tell batches apart."""
    w, e = list(weft_losses or []), list(eager_losses or [])
    same = max_rel_diff(w, e)
    shifted = max_rel_diff(w[:-1], e[1:]) if len(w) > 1 and len(e) > 1 else float("inf")
    discriminating = shifted > tol
    out = {"steps": min(len(w), len(e)), "max_rel_diff": same, "shifted_max_rel_diff": shifted, "tolerance": tol,
           "discriminating": discriminating, "ok": len(w) == len(e) > 1 and same <= tol and discriminating,
           "weft": w, "eager": e}
    if not discriminating:
        out["why"] = "the losses hardly move: a batch shift would agree too"
    return out


def table(results, peak):
    rows = ["| config | contestant | ms/step median (min-max, runs) | tokens/s | peak GPU MiB | allocator peak in use / held MiB "
            "| MFU (measured peak) | MFU (989) | MFU (989, no input embedding) | loss (last 5) | tokens/s vs compile |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, per in results.items():
        c = CONFIGS[name]
        m = MODELS[c["model"]]
        tokens = c["mb"] * c["seq"]
        ref = per.get("compile", {}).get("step_ms")
        for who, r in per.items():
            if who.startswith("_"):
                continue
            if "error" in r:
                rows.append(f"| {name} | {who} | {r['error']} | | | | | | | | |")
                continue
            tps = tokens / (r["step_ms"] / 1e3)
            fl = tps * flops_per_token(m, c["seq"])
            fl_noemb = tps * flops_per_token(m, c["seq"], input_embedding=False)
            r.update(tokens_per_s=tps, mfu_measured=fl / peak, mfu_989=fl / H100_PEAK,
                     mfu_989_no_input_embedding=fl_noemb / H100_PEAK)
            ratio = f"{ref / r['step_ms']:.3f}x" if ref else ""
            label = (f"{who} ({r['attention'].split()[0]})" if "attention" in r else
                     f"{who} (sdpa {r['sdpa']})" if "sdpa" in r else who)
            alloc = (f"{r['alloc_peak_in_use'] / 2**20:,.0f} / {r['alloc_peak_held'] / 2**20:,.0f}"
                     if r.get("alloc_peak_in_use") and r.get("alloc_peak_held") else "")
            n_ok = len([x for x in r["runs"] if "error" not in x])
            rows.append(f"| {name} | {label} | {r['step_ms']:.1f} ({r['step_ms_min']:.1f}-{r['step_ms_max']:.1f}, {n_ok}) | "
                        f"{tps:,.0f} | {r['peak_bytes'] / 2**20:,.0f} | {alloc} | "
                        f"{100 * fl / peak:.1f} % | {100 * fl / H100_PEAK:.1f} % | {100 * fl_noemb / H100_PEAK:.1f} % | "
                        f"{r['loss']:.4f} | {ratio} |")
        agree = per.get("_loss_agreement")
        if agree:
            rows.append(f"| {name} | weft vs eager, {agree['steps']} losses | max rel diff {agree['max_rel_diff']:.2e}, "
                        f"shifted one batch {agree['shifted_max_rel_diff']:.2e} "
                        f"(tolerance {agree['tolerance']:g}: {'ok' if agree['ok'] else 'FAIL'}) | | | | | | | | |")
    return "\n".join(rows)


def agreement(args, name, c, model_dir, shard):
    """weft and eager, untimed, AGREE_STEPS steps on the same batches (loss_agreement)."""
    batches = export_batches(args, name, c, model_dir, shard)
    w = weft_contestant(args, name, c, model_dir, shard, args.work, "weft", "agree", steps=AGREE_STEPS, lr=AGREE_LR)
    e = torch_contestant(args, name, c, "eager", model_dir, batches, "agree", steps=AGREE_STEPS, lr=AGREE_LR)
    if "error" in w or "error" in e:
        return {"ok": False, "why": w.get("error") or e.get("error")}
    return loss_agreement(w["losses"], e["losses"][:AGREE_STEPS])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "torch-worker":
        ap = argparse.ArgumentParser()
        ap.add_argument("cmd")
        for k in ("--mode", "--model-dir", "--batches", "--result"):
            ap.add_argument(k, required=True)
        for k in ("--mb", "--seq", "--warmup", "--steps"):
            ap.add_argument(k, type=int, required=True)
        ap.add_argument("--lr", type=float, default=LR)
        return torch_worker(ap.parse_args())
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="folder of weft-worker and weft-reference-dump")
    ap.add_argument("--out", required=True, help="folder of the logs (and speed.json, speed.md unless --json)")
    ap.add_argument("--json", help="where speed.json goes (default OUT/speed.json)")
    ap.add_argument("--work", default="/tmp/weft-speed")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--contestants", default="weft,compile,compile-cudnn,eager")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each contestant, alternating")
    ap.add_argument("--build-info", default=".gpu/build-info.json", help="weft's commit and dirty flag (JSON)")
    ap.add_argument("--info", help="provenance JSON of the whole GPU run (the driver's); merged into info")
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds after which no new measurement starts")
    ap.add_argument("--step-timeout", type=float, default=300, help="seconds one contestant may run")
    ap.add_argument("--no-agreement", dest="agreement", action="store_false", help="skip the loss agreement runs")
    args = ap.parse_args()
    t_start = time.monotonic()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    args.json = args.json or os.path.join(args.out, "speed.json")
    configs = args.configs.split(",")
    unknown = [n for n in configs if n not in CONFIGS]
    if unknown:
        sys.exit(f"speed: unknown config(s) {unknown}; known: {', '.join(CONFIGS)}")
    info = versions()
    try:
        with open(args.build_info) as f:
            info["weft"] = json.load(f)
    except OSError:
        info["weft"] = {"commit": "unknown"}
    if args.info:
        with open(args.info) as f:
            info.update({k: v for k, v in json.load(f).items() if k not in info})
    info["started_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    peak = matmul_peak()
    info["bf16_matmul_peak_tflops"] = peak / 1e12
    print(json.dumps(info), flush=True)
    shard = os.path.join(args.work, f"markov-{DATA_VOCAB}.bin")
    if not os.path.exists(shard):
        write_shard(shard, DATA_VOCAB)
    contestants = args.contestants.split(",")
    results = {name: {} for name in configs}
    raw = {name: {who: {"runs": []} for who in contestants} for name in configs}
    not_run = []
    late = lambda: time.monotonic() - t_start > args.deadline

    def model_dir(name):
        c = CONFIGS[name]
        d = os.path.join(args.work, f"{c['model']}-{c['seq']}")
        if not os.path.isdir(d):
            make_model_dir(MODELS[c["model"]], c["seq"], d)
        return d

    if args.agreement:
        for name in configs:
            if late():
                not_run.append(f"{name} loss agreement")
                continue
            a = agreement(args, name, CONFIGS[name], model_dir(name), shard)
            results[name]["_loss_agreement"] = a
            print(f"{name} loss agreement: {json.dumps({k: v for k, v in a.items() if k not in ('weft', 'eager')})}",
                  flush=True)
            write_results(args, info, results, peak, not_run)
    # Round by round across configs: a cut run has every config measured.
    for rep in range(args.repeats):
        for name in configs:
            c = CONFIGS[name]
            per = results[name]
            for who in contestants:
                if late():
                    not_run.append(f"{name} {who} run {rep + 1}")
                    continue
                t0 = time.monotonic()
                md = model_dir(name)
                if who in WEFT_VARIANTS:
                    r = weft_contestant(args, name, c, md, shard, args.work, who, rep)
                else:
                    r = torch_contestant(args, name, c, who, md, export_batches(args, name, c, md, shard), rep)
                r["seconds"] = time.monotonic() - t0
                raw[name][who]["runs"].append(r)
                print(f"{name} {who} run {rep + 1}: "
                      f"{json.dumps({k: v for k, v in r.items() if k not in ('losses', 'step_ms_all')})}", flush=True)
                per[who] = summarize(raw[name][who])
                write_results(args, info, results, peak, not_run)  # after each: a cut keeps what it measured
    print(write_results(args, info, results, peak, not_run, done=True))
    failures = failed(results)
    for f in failures:
        print(f"speed: FAIL {f}", flush=True)
    sys.exit(1 if failures else 0)


def failed(results):
    """What makes the run fail: a contestant's failed run, a failed loss agreement."""
    out = []
    for name, per in results.items():
        for who, r in per.items():
            if who == "_loss_agreement":
                if r and not r.get("ok"):
                    out.append(f"{name}: loss agreement ({r.get('why') or 'max rel diff %.3g' % r['max_rel_diff']})")
            elif not who.startswith("_"):
                out += [f"{name} {who}: {x['error']}" for x in r.get("runs", []) if "error" in x]
    return out


def write_results(args, info, results, peak, not_run=(), done=False):
    """speed.json at args.json (replaced whole: a cut leaves the last complete
    one) and the table, speed.md, in args.out."""
    md = table(results, peak)
    tmp = args.json + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"info": info, "configs": CONFIGS, "results": results, "agree_steps": AGREE_STEPS,
                   "loss_tolerance": LOSS_TOL, "data_vocab": DATA_VOCAB, "not_run": list(not_run),
                   "complete": done and not not_run, "failed": failed(results),
                   "params": {k: num_params(v) for k, v in MODELS.items()}}, f, indent=1)
    os.replace(tmp, args.json)
    with open(os.path.join(args.out, "speed.md"), "w") as f:
        f.write(json.dumps(info) + "\n\n" + md + "\n")
    return md


if __name__ == "__main__":
    main()
