#!/usr/bin/env python3
"""Held-out evaluation against PyTorch (fp32): the loss weft reports for an
evaluation during a run (summary.json's eval series) is PyTorch's mean loss
of the same weights (that step's checkpoint) over the same held-out batches
(weft-reference-dump --eval-batches), for a run on 4 ranks of ISP sp 2 x wp 2
whose evaluation each rank did a share of. Relative tolerance 1e-5.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import build_from_weights, load_safetensors, model_config  # noqa: E402

TOL = 1e-5
CONFIG = """model: {vocab_size: 96, d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 128, max_seq_len: 32}
train: {steps: 4, micro_batch: 2, seq_len: 32, log_every: 1}
data: {branching: 3}
eval: {every: 4, batches: 6}
metrics: {port: 0}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    cfg = os.path.join(a.workdir, "eval.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG + "parallel: {strategy: isp, sp: 2, wp: 2}\n")
    out = os.path.join(a.workdir, "run")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    subprocess.run([os.path.join(a.bin, "weft-run"), "-n", "4", cfg, "--out", out], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "summary.json")) as f:
        ev = json.load(f)["eval"]
    assert ev["steps"] == [4], ev
    weft_loss = ev["losses"][0]
    # That step's weights and the held-out set, as files PyTorch reads.
    one = os.path.join(a.workdir, "one.yaml")
    with open(one, "w") as f:
        f.write(CONFIG)
    dump = os.path.join(a.workdir, "dump")
    subprocess.run([os.path.join(a.bin, "weft-reference-dump"), "--config", one, "--init-from",
                    os.path.join(out, "checkpoints", "step-4"), "--eval-batches", "--out", dump], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(dump, "config.yaml")) as f:
        mcfg = model_config(yaml.safe_load(f))
    weights, _ = load_safetensors(os.path.join(dump, "weights.safetensors"))
    batches, _ = load_safetensors(os.path.join(dump, "eval_batches.safetensors"))
    torch.set_num_threads(1)
    model = build_from_weights(mcfg, weights)
    n = len([k for k in batches if k.startswith("inputs.")])
    with torch.no_grad():
        losses = [model(batches[f"inputs.{k}.0"], batches[f"targets.{k}.0"]).item() for k in range(n)]
    torch_loss = sum(losses) / n
    rel = abs(weft_loss - torch_loss) / abs(torch_loss)
    print(f"held-out loss after step 4 ({n} batches): weft on 4 ISP ranks {weft_loss:.8f}, "
          f"PyTorch {torch_loss:.8f}, rel {rel:.2e} (tolerance {TOL:.0e})")
    if not rel < TOL:
        sys.exit("FAIL: the held-out loss differs from PyTorch's")
    print("OK")


if __name__ == "__main__":
    main()
