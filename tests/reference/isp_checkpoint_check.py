#!/usr/bin/env python3
"""An ISP run's checkpoint against the PyTorch reference.

weft trains with parallel.strategy isp (sequences split over sp, weights over
wp) and writes a checkpoint after step K-1: sharded, each rank's file holding
only its part of the weights. `weft-worker --export-hf` streams it into a
Hugging Face model directory; the reference model (llama_ref.py) loads that
model.safetensors as a plain state dict and
computes the loss of step K's global batch (the batches weft-reference-dump
writes for the data-parallel ranks, world / sp of them). The run logged the
loss of step K from the same weights: they must agree within 1e-5 (relative).
"""
import argparse
import json
import os
import subprocess
import sys

import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import build_from_weights, load_safetensors, model_config  # noqa: E402

TOL = 1e-5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="directory with weft-run and weft-reference-dump")
    ap.add_argument("--config", required=True, help="an isp config; its checkpoint.every is K-1")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--ranks", type=int, default=4)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    with open(a.config) as f:
        cfg = yaml.safe_load(f)
    sp, steps = cfg["parallel"].get("sp", 1), cfg["train"]["steps"]
    every = cfg["checkpoint"]["every"]
    data_world = a.ranks // sp
    subprocess.run([os.path.join(a.bin, "weft-reference-dump"), "--config", a.config, "--out", a.workdir,
                    "--batches", str(steps), "--world", str(data_world)], check=True)
    out = os.path.join(a.workdir, "weft-run")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    subprocess.run([os.path.join(a.bin, "weft-run"), "-n", str(a.ranks), a.config, "--out", out, "--no-resume"],
                   check=True, env=env)
    with open(os.path.join(out, "summary.json")) as f:
        weft_losses = json.load(f)["losses"]
    ckpt = os.path.join(out, "checkpoints", f"step-{every}")
    with open(os.path.join(a.workdir, "config.yaml")) as f:
        resolved = yaml.safe_load(f)
    with open(os.path.join(ckpt, "meta.json")) as f:
        if json.load(f).get("weights") != "sharded":
            print(f"FAILED: {ckpt} is not a sharded checkpoint")
            return 1
    exported = os.path.join(a.workdir, "exported")
    subprocess.run(["rm", "-rf", exported], check=True)
    subprocess.run([os.path.join(a.bin, "weft-worker"), "--export-hf", ckpt, exported], check=True)
    weights, _ = load_safetensors(os.path.join(exported, "model.safetensors"))
    batches, _ = load_safetensors(os.path.join(a.workdir, "batches.safetensors"))
    model = build_from_weights(model_config(resolved), weights)
    with torch.no_grad():
        # Step `every` (0-based) ran on the weights written after `every` steps.
        ref = sum(model(batches[f"inputs.{every}.{r}"], batches[f"targets.{every}.{r}"]).item()
                  for r in range(data_world)) / data_world
    got = weft_losses[every]
    rel = abs(got - ref) / abs(ref)
    print(f"step {every + 1}: weft (isp, {a.ranks} ranks, sp {sp}, wp {cfg['parallel'].get('wp', 1)}) {got:.8f}, "
          f"PyTorch from the checkpoint {ref:.8f}, relative difference {rel:.2e} (tolerance {TOL:.0e})")
    if rel >= TOL:
        print("FAILED")
        return 1
    print("the sharded ISP checkpoint, exported, is a full model PyTorch reproduces the run's loss with")
    return 0


if __name__ == "__main__":
    sys.exit(main())
