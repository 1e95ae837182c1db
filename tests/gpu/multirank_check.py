"""Every parallel strategy on several ranks of one GPU, against one rank.

usage: python3 multirank_check.py --bin DIR --out LOGDIR [--json PATH] [--device cuda|cpu] [--steps N]
           [--deadline S] [--run-timeout S] [--only NAMES] [--allow-skip NAMES] [--expect-staged|--no-expect-staged]
           [--info JSON]

Several ranks share the GPU through host-staged collectives (comm.backend:
gloo with device: cuda, docs/comm.md): NCCL refuses two ranks on one device.
Each run trains the same small Llama through weft-run and is compared with a
one-rank run on the same device at equal global batch. The newest code runs
first, so a cut phase keeps what matters most:

  isp-sp2wp2, isp-sp2, isp-wp2                  4 ranks (dp = 4 / sp)
  zero{2,1}-{interleaved,after_backward,none}, zero{2,1}-gather   2 ranks
  cross_device        ZeRO-2 checkpoints between this device and the CPU
  dp2, dp2-bf16wire   2 ranks, bucketed data parallelism (small buckets)
  dp2-unsynced        the negative control: 2 ranks that never average their
                      gradients (WEFT_TEST_UNSYNCED_GRADS=1); the comparison
                      must FAIL on it, else the tolerances cannot tell
  hf                  the exported ZeRO-2 checkpoint in transformers

The comparison: the per-step losses and held-out losses within LOSS_TOL
(relative) of the one-rank run's, and the final f32 master weights (exported
with --export-hf) within WEIGHT_TOL (largest relative L2 difference over
tensors). Both runs round to bf16, and summation orders differ, so the bounds
are bf16's. WEIGHT_TOL is calibrated at the default 20 steps: on the CPU in
bf16 every strategy lands at 0.006-0.007 there and the unsynced control at
0.25 (at 6 steps, ctest's, 0.003 and 0.085). Empty comparisons (no losses, no tensors) fail. With
--expect-staged (the default on cuda) every multi-rank run must report
staged collectives and bytes in its summary.json (comm_groups); on the CPU
none may be staged.

Every check is recorded as it finishes in --json (default LOGDIR/multirank.json),
with the provenance passed in --info (commit, GPU, versions), so a run cut by
its caller keeps what finished. --deadline stops starting checks after that
many seconds; those left are recorded as not run and the phase is incomplete.
Every weft run has its own --run-timeout and short comm deadlines. A check
that cannot run (transformers missing for hf) is "skipped" and fails the
phase unless named in --allow-skip. Exit 0 only when every check passed and
none was left out. On the CPU (--device cpu) the same runs use plain Gloo:
how this script is tested without a GPU. Exits 77 (skipped) with --device
cuda and no GPU.
"""
import argparse, json, math, os, shutil, struct, subprocess, sys, time
from array import array

LOSS_TOL = 0.02
WEIGHT_TOL = 0.03
HF_TOL = 1e-5

MODEL = ("model: {vocab_size: 256, d_model: 128, n_layers: 4, n_heads: 4, n_kv_heads: 2, ffn_hidden: 256, "
         "max_seq_len: 64}\n")


def config(device, backend, micro_batch, steps, parallel, resume=False, dtype="bf16", comm_timeout=60):
    return ("preset: tiny\n" + MODEL +
            f"train: {{seq_len: 64, steps: {steps}, log_every: 5, micro_batch: {micro_batch}, dtype: {dtype}}}\n"
            "optim: {lr: 1.0e-3, warmup_steps: 5, min_lr_ratio: 1.0}\n"  # a schedule that does not depend on train.steps: runs stopped half way resume onto the full run
            "data: {branching: 4}\n"
            f"checkpoint: {{resume: {'true' if resume else 'false'}}}\n"
            "eval: {every: 10, batches: 4}\n"
            "metrics: {port: 0}\n"
            f"device: {device}\n"
            # Short deadlines: a hung rank fails its own run, not the phase.
            f"comm: {{backend: {backend}, timeout_s: {comm_timeout}, rendezvous_timeout_s: {comm_timeout}}}\n"
            f"parallel: {parallel}\n")


class RunFailed(RuntimeError):
    pass


def run(cmd, log, timeout, env=None):
    t0 = time.time()
    with open(log, "w") as f:
        f.write("+ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout,
                               env=dict(os.environ, **(env or {})))
        except subprocess.TimeoutExpired:
            raise RunFailed(f"{os.path.basename(cmd[0])} ran past {timeout:.0f} s (log {os.path.basename(log)})")
    if r.returncode != 0:
        sys.stdout.write(open(log).read()[-2000:])
        raise RunFailed(f"{os.path.basename(cmd[0])} exited {r.returncode} (log {os.path.basename(log)})")
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
    """Largest over tensors of ||a - b|| / ||a||; two empty models compare as a failure."""
    if not a or not b:
        raise ValueError(f"nothing to compare: {len(a)} and {len(b)} tensors")
    if sorted(a) != sorted(b):
        raise ValueError(f"tensor names differ: {sorted(set(a) ^ set(b))}")
    worst = 0.0
    try:
        import numpy as np
        for k in a:
            x, y = np.frombuffer(a[k], np.float32).astype(np.float64), np.frombuffer(b[k], np.float32)
            if x.size != y.size or x.size == 0:
                raise ValueError(f"tensor {k}: {x.size} vs {y.size} values")
            worst = max(worst, float(np.linalg.norm(x - y) / max(np.linalg.norm(x), 1e-30)))
    except ImportError:
        for k in a:
            if len(a[k]) != len(b[k]) or not a[k]:
                raise ValueError(f"tensor {k}: {len(a[k])} vs {len(b[k])} values")
            d = sum((x - y) ** 2 for x, y in zip(a[k], b[k]))
            n = sum(x * x for x in a[k])
            worst = max(worst, math.sqrt(d / max(n, 1e-30)))
    return worst


def series_diff(got, want):
    """Largest relative difference of two equally long, non-empty series (inf otherwise)."""
    if not got or len(got) != len(want):
        return float("inf")
    return max(abs(x - y) / abs(y) for x, y in zip(got, want))


def staged_figures(summary):
    groups = summary.get("comm_groups")
    if groups is None:
        return None, None
    return (sum(g.get("staged_collectives", 0) for g in groups.values()),
            sum(g.get("staged_bytes", 0) for g in groups.values()))


class Checks:
    def __init__(self, args, info):
        self.args, self.info = args, info
        self.results = []
        self.failed = 0
        self.t0 = time.time()
        self.left_out = []

    def path(self, *p):
        return os.path.join(self.args.out, "multirank", *p)

    def write(self, complete=False):
        """The JSON as it stands: written after every check, so a cut keeps what finished."""
        a = self.args
        report = {"info": self.info, "device": a.device,
                  "backend": "gloo (host-staged)" if a.device == "cuda" else "gloo",
                  "steps": a.steps, "loss_tolerance": LOSS_TOL, "weight_tolerance": WEIGHT_TOL,
                  "expect_staged": a.expect_staged, "seconds": time.time() - self.t0,
                  "checks": self.results, "failed": self.failed, "not_run": self.left_out,
                  "complete": complete}
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1)
        os.replace(tmp, a.json)

    def train(self, name, ranks, text, out=None, copy_from=None, env=None):
        """Runs one training; returns (summary.json, seconds)."""
        cfg = self.path(name + ".yaml")
        with open(cfg, "w") as f:
            f.write(text)
        out = out or self.path(name)
        shutil.rmtree(out, ignore_errors=True)
        if copy_from:
            shutil.copytree(copy_from, out)
        b = self.args.bin
        cmd = ([os.path.join(b, "weft-worker"), cfg, "--out", out] if ranks == 1 else
               [os.path.join(b, "weft-run"), "-n", str(ranks), cfg, "--out", out])
        secs = run(cmd, self.path(name + ".log"), self.args.run_timeout, env)
        with open(os.path.join(out, "summary.json")) as f:
            return json.load(f), secs

    def exported(self, run_dir, name):
        with open(os.path.join(run_dir, "checkpoints", "latest")) as f:
            ckpt = os.path.join(run_dir, "checkpoints", f.read().strip())
        dst = self.path(name + "-hf")
        shutil.rmtree(dst, ignore_errors=True)
        run([os.path.join(self.args.bin, "weft-worker"), "--export-hf", ckpt, dst], self.path(name + "-export.log"),
            self.args.run_timeout)
        return dst

    def record(self, name, ok, **figures):
        figures.update(name=name, ok=ok)
        self.results.append(figures)
        if not ok:
            self.failed += 1
        shown = {k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in figures.items()
                 if k not in ("name", "ok", "losses", "reference_losses")}
        status = "SKIP" if figures.get("skipped") else "PASS" if ok else "FAIL"
        print(f"{status} {name}: {shown}", flush=True)
        self.write()

    def staged_ok(self, ranks, summary):
        """(ok, count, bytes): multi-rank runs staged collectives on cuda, none elsewhere."""
        count, nbytes = staged_figures(summary)
        if ranks == 1:
            return True, count, nbytes
        if count is None:
            return False, None, None  # a summary without comm_groups: a build before the figures
        if self.args.expect_staged:
            return count > 0 and nbytes > 0, count, nbytes
        return count == 0, count, nbytes

    def compare(self, name, ranks, micro_batch, parallel, reference, env=None, control=False):
        """One strategy against one rank; `control`: the comparison must fail (negative control)."""
        a = self.args
        summary, secs = self.train(name, ranks, config(a.device, a.backend, micro_batch, a.steps, parallel), env=env)
        ref_summary, ref_weights = reference
        losses, want = summary["losses"], ref_summary["losses"]
        loss_diff = series_diff(losses, want)
        # The held-out loss, evaluated by every rank's share, against one rank's.
        eval_diff = series_diff(summary["eval"]["losses"], ref_summary["eval"]["losses"])
        w = rel_diff(ref_weights, load_safetensors(os.path.join(self.exported(self.path(name), name), "model.safetensors")))
        staged, count, nbytes = self.staged_ok(ranks, summary)
        matches = loss_diff <= LOSS_TOL and eval_diff <= LOSS_TOL and w <= WEIGHT_TOL
        sync = summary.get("gradient_sync", {})
        figures = dict(ranks=ranks, parallel=parallel, loss_rel_diff=loss_diff, weight_rel_diff=w,
                       eval_rel_diff=eval_diff, staged_collectives=count, staged_bytes=nbytes,
                       overlap_ratio=sync.get("overlap_ratio"), final_loss=losses[-1] if losses else None,
                       seconds=secs, losses=losses, reference_losses=want)
        if control:
            self.record(name + " (negative control: must not match)", not matches and staged, **figures)
        else:
            self.record(name, matches and staged, **figures)

    def reference(self, micro_batch):
        a = self.args
        name = f"one-mb{micro_batch}"
        summary, _ = self.train(name, 1, config(a.device, a.backend, micro_batch, a.steps, "{}"))
        return summary, load_safetensors(os.path.join(self.exported(self.path(name), name), "model.safetensors"))

    def tracks(self, name, got, want, first):
        """Steps first.. of `got` (a resumed run) against the uninterrupted run."""
        g, w = got["losses"], want["losses"][first:]
        diff = series_diff(g, w)
        self.record(name, diff <= LOSS_TOL, loss_rel_diff=diff, steps_resumed=len(g))

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

    def hf(self):
        """The exported ZeRO-2 checkpoint (cross_device's half-way run) in transformers, with weft's loss."""
        a = self.args
        name = f"{a.device} ZeRO-2 checkpoint --export-hf in transformers"
        try:
            import torch
            import torch.nn.functional as F
            from safetensors import safe_open
            from safetensors.torch import load_file
            from transformers import AutoModelForCausalLM
        except ImportError as e:
            self.record(name, "hf" in a.allow_skip, skipped=True, why=f"transformers not importable: {e}")
            return
        if not os.path.isdir(self.path("zero2-half", "checkpoints")):
            self.train("zero2-half", 2, config(a.device, a.backend, 2, a.steps // 2,
                                               "{strategy: zero, zero: {stage: 2}, bucket_cap_mb: 0.25}"))
        model_dir = self.exported(self.path("zero2-half"), "zero2-half")
        cfg = self.path("hf.yaml")
        with open(cfg, "w") as f:
            f.write(config("cpu", "auto", 4, 1, "{}", dtype="f32"))
        dump = self.path("hf-dump")
        run([os.path.join(a.bin, "weft-reference-dump"), "--config", cfg, "--init-from", model_dir, "--out", dump],
            self.path("hf-dump.log"), a.run_timeout)
        with safe_open(os.path.join(dump, "grads.safetensors"), "pt") as f:
            want = float(f.metadata()["loss"])
        batch = load_file(os.path.join(dump, "batch.safetensors"))
        dev = "cuda" if a.device == "cuda" else "cpu"
        m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(dev).eval()
        with torch.no_grad():
            logits = m(input_ids=batch["inputs"].long().to(dev)).logits.float()
        got = float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["targets"].long().to(dev).reshape(-1)))
        rel = abs(got - want) / abs(want)
        self.record(name, rel <= HF_TOL, transformers_loss=got, weft_loss=want, rel_diff=rel)


def plan(c):
    """(name, function) in the order they run: the newest code first."""
    one4 = []  # the one-rank reference, made by the first check that needs it

    def ref():
        if not one4:
            one4.append(c.reference(4))
        return one4[0]

    def cmp(name, ranks, mb, parallel, **kw):
        return name, lambda: c.compare(name, ranks, mb, parallel, ref(), **kw)

    # ISP on 4 ranks: data parallelism is world / sp ranks (the wp ranks of a
    # block train on different samples), so the global batch is 4 samples with
    # micro-batch 2 under sp 2 and micro-batch 1 under wp 2 alone.
    checks = [cmp("isp-sp2wp2", 4, 2, "{strategy: isp, sp: 2, wp: 2, bucket_cap_mb: 0.25}"),
              cmp("isp-sp2", 4, 2, "{strategy: isp, sp: 2, bucket_cap_mb: 0.25}"),
              cmp("isp-wp2", 4, 1, "{strategy: isp, wp: 2, bucket_cap_mb: 0.25}")]
    for stage in (2, 1):
        for mode in ("interleaved", "after_backward", "none"):
            checks.append(cmp(f"zero{stage}-{mode}", 2, 2,
                              f"{{strategy: zero, bucket_cap_mb: 0.25, zero: {{stage: {stage}, overlap: {mode}}}}}"))
        checks.append(cmp(f"zero{stage}-gather", 2, 2,
                          f"{{strategy: zero, bucket_cap_mb: 0.25, zero: {{stage: {stage}, overlap_param_gather: true}}}}"))
    checks.append(("cross_device", c.cross_device))
    checks += [cmp("dp2", 2, 2, "{bucket_cap_mb: 0.25}"),
               cmp("dp2-unsynced", 2, 2, "{bucket_cap_mb: 0.25}", env={"WEFT_TEST_UNSYNCED_GRADS": "1"}, control=True),
               cmp("dp2-bf16wire", 2, 2, "{bucket_cap_mb: 0.25, bf16_wire: true}"),
               ("hf", c.hf)]
    return checks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True, help="folder of the logs (LOGDIR/multirank/...)")
    ap.add_argument("--json", help="the record (default LOGDIR/multirank.json)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--only", default="", help="comma-separated check names (default: all)")
    ap.add_argument("--allow-skip", default="", help="comma-separated checks that may be skipped (hf)")
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds after which no check starts")
    ap.add_argument("--run-timeout", type=float, default=120, help="seconds one weft run may take")
    ap.add_argument("--expect-staged", dest="expect_staged", action="store_true", default=None)
    ap.add_argument("--no-expect-staged", dest="expect_staged", action="store_false")
    ap.add_argument("--info", help="JSON file of the run's provenance (commit, GPU, versions)")
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin)
    args.backend = "gloo"
    args.json = args.json or os.path.join(args.out, "multirank.json")
    args.allow_skip = set(filter(None, args.allow_skip.split(",")))
    if args.expect_staged is None:
        args.expect_staged = args.device == "cuda"
    if args.device == "cuda":
        try:
            smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
            if smi.returncode != 0 or "GPU" not in smi.stdout:
                raise OSError(smi.stderr)
        except OSError as e:
            print(f"SKIP: no GPU ({e})")
            sys.exit(77)
    info = {}
    if args.info:
        with open(args.info) as f:
            info = json.load(f)
    c = Checks(args, info)
    shutil.rmtree(c.path(), ignore_errors=True)
    os.makedirs(c.path())
    only = set(filter(None, args.only.split(",")))
    checks = [(n, fn) for n, fn in plan(c) if not only or n in only]
    unknown = only - {n for n, _ in plan(c)}
    if unknown:
        sys.exit(f"multirank_check: unknown check(s) {sorted(unknown)}")
    c.write()
    for i, (name, fn) in enumerate(checks):
        if time.time() - c.t0 > args.deadline:
            c.left_out = [n for n, _ in checks[i:]]
            print(f"deadline ({args.deadline:.0f} s) reached: not run: {', '.join(c.left_out)}", flush=True)
            break
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - a failed run, export or comparison is one failed check
            c.record(name, False, error=f"{type(e).__name__}: {e}")
    # Keep the logs and summaries, not the checkpoints (they would travel back
    # from the GPU machine with the logs).
    for root, dirs, _ in os.walk(c.path()):
        for d in list(dirs):
            if d == "checkpoints" or d.endswith("-hf") or d == "hf-dump":
                shutil.rmtree(os.path.join(root, d), ignore_errors=True)
                dirs.remove(d)
    c.write(complete=not c.left_out)
    print(f"{len(c.results) - c.failed} of {len(c.results)} checks passed, {len(c.left_out)} not run, "
          f"in {time.time() - c.t0:.0f} s")
    sys.exit(1 if c.failed or c.left_out else 0)


if __name__ == "__main__":
    main()
