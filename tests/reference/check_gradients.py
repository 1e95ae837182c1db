#!/usr/bin/env python3
"""Whole-model check of weft's forward loss and every parameter gradient
against PyTorch autograd on identical weights and batch (fp32).

Runs weft-reference-dump, loads its safetensors files into llama_ref.LlamaRef,
and requires relative error < 1e-4 for the loss and for each gradient
(||g_weft - g_torch|| / ||g_torch||).
"""
import argparse
import os
import subprocess
import sys

import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import build_from_weights, load_safetensors, model_config  # noqa: E402

TOL = 1e-4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    subprocess.run([a.dump, "--config", a.config, "--out", a.workdir], check=True)

    with open(os.path.join(a.workdir, "config.yaml")) as f:
        resolved = yaml.safe_load(f)
    # The dump's resolved config carries every model field the test config
    # sets (head_dim, rope_scaling...): the reference is built from it.
    with open(a.config) as f:
        asked = yaml.safe_load(f).get("model", {})
    def same(got, want):  # weft writes 1e-06 and 5e+05, which YAML 1.1 reads as strings
        if isinstance(want, dict):
            return isinstance(got, dict) and all(same(got.get(k), v) for k, v in want.items())
        if isinstance(want, (int, float)) and not isinstance(want, bool):
            try:
                return float(got) == float(want)
            except (TypeError, ValueError):
                return False
        return got == want

    for k, v in asked.items():
        if not same(resolved["model"].get(k), v):
            raise SystemExit(f"weft-reference-dump's config.yaml has model.{k} {resolved['model'].get(k)!r}, "
                             f"the test config {v!r}")
    cfg = model_config(resolved)
    print(f"model: head_dim {cfg['head_dim']}, rope_scaling {cfg['rope_scaling']}")
    weights, _ = load_safetensors(os.path.join(a.workdir, "weights.safetensors"))
    batch, _ = load_safetensors(os.path.join(a.workdir, "batch.safetensors"))
    if cfg["eos_token"] is not None:
        # A packed batch must hold documents that start inside rows, or it
        # checks nothing beyond one causal sequence a row.
        inside = int((batch["inputs"][:, :-1] == cfg["eos_token"]).sum())
        print(f"packed documents: {inside} start inside a row (eos token {cfg['eos_token']})")
        if inside < 3:
            raise SystemExit("the packed batch has fewer than 3 documents starting inside a row; pick another eos_token")
    grads, meta = load_safetensors(os.path.join(a.workdir, "grads.safetensors"))
    torch.set_num_threads(1)
    model = build_from_weights(cfg, weights)
    loss = model(batch["inputs"], batch["targets"])
    loss.backward()

    failures = []
    weft_loss = float(meta["loss"])
    rel = abs(weft_loss - loss.item()) / abs(loss.item())
    print(f"loss: weft {weft_loss:.8f} torch {loss.item():.8f} rel {rel:.2e}")
    if rel >= TOL:
        failures.append(f"loss rel error {rel:.2e}")
    params = dict(model.named_parameters())
    if set(params) != set(grads):
        failures.append(f"parameter names differ: weft-only {set(grads) - set(params)}, torch-only {set(params) - set(grads)}")
    worst = 0.0
    for name, p in params.items():
        if name not in grads:
            continue
        g = grads[name].reshape(p.grad.shape)
        err = (g - p.grad).norm().item() / max(p.grad.norm().item(), 1e-30)
        worst = max(worst, err)
        if err >= TOL:
            failures.append(f"{name}: rel error {err:.2e}")
    print(f"{len(params)} gradients, worst relative error {worst:.2e} (tolerance {TOL:.0e})")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("gradients match PyTorch autograd")
    return 0


if __name__ == "__main__":
    sys.exit(main())
