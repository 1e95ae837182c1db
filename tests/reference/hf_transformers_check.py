"""weft <-> transformers, both ways, with transformers itself.

usage: python3 hf_transformers_check.py --bin BUILD/bin --workdir DIR [--device cuda] [--weft-device cuda]
       [--variant llama3]

1. weft-worker trains a small model for a few steps; its checkpoint directory
   must load with AutoModelForCausalLM.from_pretrained and give weft's loss on
   the same batch: fp32 within 1e-5 relative, bf16 within 2e-2.
2. A model written by save_pretrained (fp32 and bf16) must start a weft run
   (--init-from) and give transformers' loss on weft's batch (fp32 within 1e-5,
   the bf16 weights are loaded exactly, so also within 1e-5 of transformers'
   fp32 loss on the same bf16-rounded weights).

Needs torch, transformers and safetensors (the pinned venv of
scripts/python-env.sh); without them it fails, naming what is missing. Runs on the CPU without --device cuda; the GPU machine check uses cuda.
--weft-device cuda trains step 1's model on the GPU (bf16 working weights,
f32 master weights in the checkpoint): the proof that a GPU run's checkpoint
is what transformers users expect. --variant llama3 does both with a Llama
3.2-shaped model (rope_type llama3 with its bands inside the trained
positions, head_dim apart from hidden_size / heads, tied embeddings).
"""
import argparse, json, os, shutil, subprocess, sys

try:
    import torch
    import torch.nn.functional as F
    import transformers
    from safetensors.torch import load_file
except ImportError as e:
    sys.exit(f"FAIL: {e} (run with the venv of scripts/python-env.sh: {sys.executable} lacks it)")

CONFIG = """preset: tiny
model: {vocab_size: 256, d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 160,
        max_seq_len: 64, rope_theta: 50000, norm_eps: 1.0e-6}
train: {steps: 5, micro_batch: 4, seq_len: 32, log_every: 1}
data: {branching: 4}
metrics: {port: 0}
"""

CONFIG_LLAMA3 = """preset: tiny
model: {vocab_size: 256, d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 1, head_dim: 32, ffn_hidden: 256,
        max_seq_len: 256, rope_theta: 500000, norm_eps: 1.0e-5, tie_embeddings: true,
        rope_scaling: {rope_type: llama3, factor: 32, low_freq_factor: 1, high_freq_factor: 4,
                       original_max_position_embeddings: 64}}
train: {steps: 5, micro_batch: 4, seq_len: 32, log_every: 1}
data: {branching: 4}
metrics: {port: 0}
"""


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        print(r.stdout)
        sys.exit(f"FAIL: {cmd[0]} exited {r.returncode}")
    return r.stdout


def weft_loss(args, cfg, init_from, out):
    """weft's loss on the config's first batch with init_from's weights."""
    run([os.path.join(args.bin, "weft-reference-dump"), "--config", cfg, "--init-from", init_from,
         "--out", out])
    from safetensors import safe_open
    with safe_open(os.path.join(out, "grads.safetensors"), "pt") as f:
        loss = float(f.metadata()["loss"])
    batch = load_file(os.path.join(out, "batch.safetensors"))
    return loss, batch["inputs"].long(), batch["targets"].long()


def hf_loss(model, inputs, targets, device):
    with torch.no_grad():
        logits = model(input_ids=inputs.to(device)).logits.float()
    return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.to(device).reshape(-1)))


def check(name, got, want, tol):
    rel = abs(got - want) / abs(want)
    print(f"{name}: transformers {got:.9f}, weft {want:.9f}, rel diff {rel:.3g} (tolerance {tol:g})")
    if not rel <= tol:
        sys.exit(f"FAIL: {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--weft-device", default="cpu", help="where weft-worker trains the model of step 1")
    ap.add_argument("--variant", default="llama2", choices=["llama2", "llama3"])
    args = ap.parse_args()
    config = CONFIG_LLAMA3 if args.variant == "llama3" else CONFIG
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    cfg = os.path.join(args.workdir, "c.yaml")
    with open(cfg, "w") as f:
        f.write(config)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, device {args.device}")

    # 1. weft checkpoint -> from_pretrained.
    train_cfg = os.path.join(args.workdir, "train.yaml")
    with open(train_cfg, "w") as f:
        f.write(config + f"device: {args.weft_device}\n")
    out = run([os.path.join(args.bin, "weft-worker"), train_cfg, "--out", os.path.join(args.workdir, "run")])
    print("\n".join(l for l in out.splitlines() if "step" in l or "device" in l))
    ckpt = os.path.join(args.workdir, "run", "checkpoints", "step-5")
    want, inputs, targets = weft_loss(args, cfg, ckpt, os.path.join(args.workdir, "dump-weft"))
    from transformers import AutoModelForCausalLM
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        m = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype).to(args.device).eval()
        check(f"from_pretrained(weft checkpoint, {dtype})", hf_loss(m, inputs, targets, args.device), want, tol)

    # 2. save_pretrained -> weft (--init-from), fp32 and bf16 files.
    torch.manual_seed(1)
    ref = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.01 * torch.randn_like(p))
    for dtype in (torch.float32, torch.bfloat16):
        d = os.path.join(args.workdir, f"saved-{str(dtype).split('.')[-1]}")
        ref.to(dtype).save_pretrained(d)
        m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).to(args.device).eval()
        want, inputs, targets = weft_loss(args, cfg, d, d + "-dump")
        check(f"weft --init-from save_pretrained({dtype})", hf_loss(m, inputs, targets, args.device), want, 1e-5)
        out = run([os.path.join(args.bin, "weft-worker"), cfg, "--init-from", d, "--steps", "3",
                   "--out", d + "-run"])
        if "initialized" not in out:
            sys.exit("FAIL: the run did not start from the saved model")
        ref.to(torch.float32)
    print("OK")


if __name__ == "__main__":
    main()
