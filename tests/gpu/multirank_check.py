"""Every parallel strategy on several ranks of one GPU, against one rank.

usage: python3 multirank_check.py --bin DIR --out DIR [--device cuda|cpu] [--steps N]

Several ranks share the GPU through host-staged collectives (comm.backend:
gloo with device: cuda, docs/comm.md): NCCL refuses two ranks on one device.
Each run trains the same small Llama through weft-run and is compared with a
one-rank run on the same device at equal global batch:

  dp2                 2 ranks, bucketed data parallelism (small buckets)
  zero{1,2}-{none,after_backward,interleaved}   2 ranks, each ZeRO overlap mode
  zero{1,2}-gather    2 ranks, overlap_param_gather
  isp-sp2, isp-wp2, isp-sp2wp2                  4 ranks (dp = 4 / sp)
  dp2-bf16wire        2 ranks, gradients all-reduced in bf16

The check: every step's loss, and the held-out loss evaluated every 10 steps,
within LOSS_TOL (relative) of the one-rank run's, and the final f32 master weights (the checkpoint, exported with --export-hf)
within WEIGHT_TOL (largest relative L2 difference over tensors). Both bounds
are bf16's: both runs round their working weights, activations and gradients
to bf16, and summation orders differ (docs/cuda.md bounds bf16 runs at 2 % a
step). Then checkpoints cross devices: a 2-rank ZeRO-2 checkpoint of this
device resumes on one CPU rank, and a CPU checkpoint on 2 ranks of this
device, each tracking the uninterrupted run within LOSS_TOL; with
transformers installed, the exported ZeRO checkpoint loads with
from_pretrained and gives weft's loss on weft's batch (fp32, 1e-5).

Every run's figures (losses, weight difference, overlap ratio, seconds) go to
OUT/multirank.json; the exit code is 0 only if every check passed. On the
CPU (--device cpu) the same runs use plain Gloo: how this script is tested
without a GPU. Exits 77 (skipped) with --device cuda and no GPU.
"""
import argparse, json, math, os, shutil, struct, subprocess, sys, time
from array import array

LOSS_TOL = 0.02
WEIGHT_TOL = 0.05
HF_TOL = 1e-5

MODEL = ("model: {vocab_size: 256, d_model: 128, n_layers: 4, n_heads: 4, n_kv_heads: 2, ffn_hidden: 256, "
         "max_seq_len: 64}\n")


def config(device, backend, micro_batch, steps, parallel, resume=False, dtype="bf16"):
    return ("preset: tiny\n" + MODEL +
            f"train: {{seq_len: 64, steps: {steps}, log_every: 5, micro_batch: {micro_batch}, dtype: {dtype}}}\n"
            "optim: {lr: 1.0e-3, warmup_steps: 5, min_lr_ratio: 1.0}\n"  # a schedule that does not depend on train.steps: runs stopped half way resume onto the full run

            "data: {branching: 4}\n"
            f"checkpoint: {{resume: {'true' if resume else 'false'}}}\n"
            "eval: {every: 10, batches: 4}\n"
            "metrics: {port: 0}\n"
            f"device: {device}\n"
            f"comm: {{backend: {backend}}}\n"
            f"parallel: {parallel}\n")


def run(cmd, log):
    t0 = time.time()
    with open(log, "w") as f:
        f.write("+ " + " ".join(cmd) + "\n")
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=600)
    if r.returncode != 0:
        sys.stdout.write(open(log).read()[-3000:])
        raise RuntimeError(f"{os.path.basename(cmd[0])} exited {r.returncode} (log {log})")
    return time.time() - t0


def load_safetensors(path):
    """name -> list of floats (f32 or bf16), standard library only."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[a:b]
        if t["dtype"] == "F32":
            v = array("f")
            v.frombytes(raw)
        elif t["dtype"] == "BF16":
            h = array("H")
            h.frombytes(raw)
            v = array("f")
            v.frombytes(b"".join(struct.pack("<I", x << 16) for x in h))
        else:
            continue
        out[name] = v
    return out


def rel_diff(a, b):
    """Largest over tensors of ||a - b|| / ||a||."""
    if sorted(a) != sorted(b):
        raise RuntimeError(f"tensor names differ: {sorted(set(a) ^ set(b))}")
    worst = 0.0
    try:
        import numpy as np
        for k in a:
            x, y = np.frombuffer(a[k], np.float32).astype(np.float64), np.frombuffer(b[k], np.float32)
            worst = max(worst, float(np.linalg.norm(x - y) / max(np.linalg.norm(x), 1e-30)))
    except ImportError:
        for k in a:
            d = sum((x - y) ** 2 for x, y in zip(a[k], b[k]))
            n = sum(x * x for x in a[k])
            worst = max(worst, math.sqrt(d / max(n, 1e-30)))
    return worst


class Checks:
    def __init__(self, args):
        self.args = args
        self.results = []
        self.failed = 0

    def path(self, *p):
        return os.path.join(self.args.out, "multirank", *p)

    def train(self, name, ranks, text, out=None, copy_from=None):
        """Runs one training; returns (summary.json, seconds)."""
        cfg = self.path(name + ".yaml")
        with open(cfg, "w") as f:
            f.write(text)
        out = out or self.path(name)
        if copy_from:
            shutil.rmtree(out, ignore_errors=True)
            shutil.copytree(copy_from, out)
        b = self.args.bin
        cmd = ([os.path.join(b, "weft-worker"), cfg, "--out", out] if ranks == 1 else
               [os.path.join(b, "weft-run"), "-n", str(ranks), cfg, "--out", out])
        secs = run(cmd, self.path(name + ".log"))
        with open(os.path.join(out, "summary.json")) as f:
            return json.load(f), secs

    def exported(self, run_dir, name):
        with open(os.path.join(run_dir, "checkpoints", "latest")) as f:
            ckpt = os.path.join(run_dir, "checkpoints", f.read().strip())
        dst = self.path(name + "-hf")
        shutil.rmtree(dst, ignore_errors=True)
        run([os.path.join(self.args.bin, "weft-worker"), "--export-hf", ckpt, dst], self.path(name + "-export.log"))
        return dst

    def record(self, name, ok, **figures):
        figures.update(name=name, ok=ok)
        self.results.append(figures)
        if not ok:
            self.failed += 1
        shown = {k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in figures.items()
                 if k not in ("name", "ok", "losses", "reference_losses")}
        print(f"{'PASS' if ok else 'FAIL'} {name}: {shown}", flush=True)

    def compare(self, name, ranks, micro_batch, parallel, reference):
        a = self.args
        try:
            summary, secs = self.train(name, ranks, config(a.device, a.backend, micro_batch, a.steps, parallel))
        except Exception as e:  # a failed run is one failed check; the others still run
            self.record(name, False, error=str(e))
            return
        ref_summary, ref_weights = reference
        losses, want = summary["losses"], ref_summary["losses"]
        loss_diff = max(abs(x - y) / abs(y) for x, y in zip(losses, want))
        # The held-out loss, evaluated by every rank's share, against one rank's.
        ev, ev_want = summary["eval"]["losses"], ref_summary["eval"]["losses"]
        eval_diff = max(abs(x - y) / abs(y) for x, y in zip(ev, ev_want)) if ev else float("inf")
        w = rel_diff(ref_weights, load_safetensors(os.path.join(self.exported(self.path(name), name), "model.safetensors")))
        sync = summary.get("gradient_sync", {})
        self.record(name, len(losses) == len(want) and loss_diff <= LOSS_TOL and w <= WEIGHT_TOL
                    and len(ev) == len(ev_want) and eval_diff <= LOSS_TOL,
                    ranks=ranks, parallel=parallel, loss_rel_diff=loss_diff, weight_rel_diff=w,
                    eval_rel_diff=eval_diff,
                    overlap_ratio=sync.get("overlap_ratio"), final_loss=losses[-1], seconds=secs,
                    losses=losses, reference_losses=want)

    def reference(self, micro_batch):
        a = self.args
        name = f"one-mb{micro_batch}"
        summary, _ = self.train(name, 1, config(a.device, a.backend, micro_batch, a.steps, "{}"))
        return summary, load_safetensors(os.path.join(self.exported(self.path(name), name), "model.safetensors"))

    def tracks(self, name, got, want, first):
        """Steps first.. of `got` (a resumed run) against the uninterrupted run."""
        g, w = got["losses"], want["losses"][first:]
        diff = max(abs(x - y) / abs(y) for x, y in zip(g, w)) if g else float("inf")
        self.record(name, len(g) == len(w) and diff <= LOSS_TOL, loss_rel_diff=diff, steps_resumed=len(g))

    def cross_device(self):
        """ZeRO checkpoints between this device and the CPU."""
        a = self.args
        half = a.steps // 2
        zero = "{strategy: zero, zero: {stage: 2}, bucket_cap_mb: 0.25}"
        # This device, 2 ranks, to the end and to half way; then one CPU rank from half way.
        full, _ = self.train("zero2-full", 2, config(a.device, a.backend, 2, a.steps, zero))
        self.train("zero2-half", 2, config(a.device, a.backend, 2, half, zero))
        resumed, _ = self.train("zero2-half-on-cpu", 1, config("cpu", "auto", 4, a.steps, "{}", resume=True),
                                copy_from=self.path("zero2-half"))
        self.tracks(f"{a.device} 2-rank ZeRO-2 checkpoint resumed on 1 CPU rank", resumed, full, half)
        # One CPU rank to the end and half way; then 2 ranks of this device from half way.
        cpu_full, _ = self.train("cpu-full", 1, config("cpu", "auto", 4, a.steps, "{}"))
        self.train("cpu-half", 1, config("cpu", "auto", 4, half, "{}"))
        resumed, _ = self.train("cpu-half-on-device", 2, config(a.device, a.backend, 2, a.steps, zero, resume=True),
                                copy_from=self.path("cpu-half"))
        self.tracks(f"CPU checkpoint resumed on 2 {a.device} ranks (ZeRO-2)", resumed, cpu_full, half)
        self.hf(self.exported(self.path("zero2-half"), "zero2-half"))

    def hf(self, model_dir):
        """The exported ZeRO checkpoint in transformers, with weft's loss."""
        try:
            import torch
            import torch.nn.functional as F
            from safetensors import safe_open
            from safetensors.torch import load_file
            from transformers import AutoModelForCausalLM
        except ImportError as e:
            print(f"SKIP transformers check: {e}")
            return
        a = self.args
        cfg = self.path("hf.yaml")
        with open(cfg, "w") as f:
            f.write(config("cpu", "auto", 4, 1, "{}", dtype="f32"))
        dump = self.path("hf-dump")
        run([os.path.join(a.bin, "weft-reference-dump"), "--config", cfg, "--init-from", model_dir, "--out", dump],
            self.path("hf-dump.log"))
        with safe_open(os.path.join(dump, "grads.safetensors"), "pt") as f:
            want = float(f.metadata()["loss"])
        batch = load_file(os.path.join(dump, "batch.safetensors"))
        dev = "cuda" if a.device == "cuda" else "cpu"
        m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(dev).eval()
        with torch.no_grad():
            logits = m(input_ids=batch["inputs"].long().to(dev)).logits.float()
        got = float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["targets"].long().to(dev).reshape(-1)))
        rel = abs(got - want) / abs(want)
        self.record(f"{a.device} ZeRO-2 checkpoint --export-hf in transformers", rel <= HF_TOL,
                    transformers_loss=got, weft_loss=want, rel_diff=rel)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--only", default="", help="comma-separated run names (default: all)")
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin)
    args.backend = "gloo"
    if args.device == "cuda":
        try:
            smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
            if smi.returncode != 0 or "GPU" not in smi.stdout:
                raise OSError(smi.stderr)
        except OSError as e:
            print(f"SKIP: no GPU ({e})")
            sys.exit(77)
    c = Checks(args)
    shutil.rmtree(c.path(), ignore_errors=True)
    os.makedirs(c.path())
    only = set(filter(None, args.only.split(",")))
    want = lambda n: not only or n in only
    t0 = time.time()
    one4 = c.reference(4)
    runs = [("dp2", 2, 2, "{bucket_cap_mb: 0.25}", one4),
            ("dp2-bf16wire", 2, 2, "{bucket_cap_mb: 0.25, bf16_wire: true}", one4)]
    for stage in (1, 2):
        for mode in ("none", "after_backward", "interleaved"):
            runs.append((f"zero{stage}-{mode}", 2, 2,
                         f"{{strategy: zero, bucket_cap_mb: 0.25, zero: {{stage: {stage}, overlap: {mode}}}}}", one4))
        runs.append((f"zero{stage}-gather", 2, 2,
                     f"{{strategy: zero, bucket_cap_mb: 0.25, zero: {{stage: {stage}, overlap_param_gather: true}}}}", one4))
    # ISP on 4 ranks: data parallelism is world / sp ranks (the wp ranks of a
    # block train on different samples), so the global batch is 4 samples with
    # micro-batch 2 under sp 2 and micro-batch 1 under wp 2 alone.
    runs += [("isp-sp2", 4, 2, "{strategy: isp, sp: 2, bucket_cap_mb: 0.25}", one4),
             ("isp-wp2", 4, 1, "{strategy: isp, wp: 2, bucket_cap_mb: 0.25}", one4),
             ("isp-sp2wp2", 4, 2, "{strategy: isp, sp: 2, wp: 2, bucket_cap_mb: 0.25}", one4)]
    for name, ranks, mb, parallel, ref in runs:
        if want(name):
            c.compare(name, ranks, mb, parallel, ref)
    if want("cross_device"):
        try:
            c.cross_device()
        except Exception as e:
            c.record("cross-device checkpoints", False, error=str(e))
    # Keep the logs and summaries, not the checkpoints (they would travel back
    # from the GPU machine with the logs).
    for root, dirs, _ in os.walk(c.path()):
        for d in list(dirs):
            if d == "checkpoints" or d.endswith("-hf") or d == "hf-dump":
                shutil.rmtree(os.path.join(root, d), ignore_errors=True)
                dirs.remove(d)
    report = {"device": args.device, "backend": "gloo (host-staged)" if args.device == "cuda" else "gloo",
              "steps": args.steps, "loss_tolerance": LOSS_TOL, "weight_tolerance": WEIGHT_TOL,
              "seconds": time.time() - t0, "checks": c.results, "failed": c.failed}
    with open(os.path.join(args.out, "multirank.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"{len(c.results) - c.failed} of {len(c.results)} checks passed in {time.time() - t0:.0f} s")
    sys.exit(1 if c.failed else 0)


if __name__ == "__main__":
    main()
