#!/usr/bin/env python3
"""weft's data parallelism against PyTorch DistributedDataParallel.

Both start from the weights weft writes (weights.safetensors) and train on the
batches weft's data source hands each rank (batches.safetensors): weft through
`weft-run -n 2`, PyTorch with DDP over gloo (bucket_cap_mb=25), AdamW with the
same decay groups, warmup+cosine schedule and global-norm clipping. The
per-step loss (mean over ranks) must agree within 1e-4 for 20 steps.

With --zero (the config sets parallel.strategy: zero), PyTorch's peer is DDP
plus torch.distributed.optim.ZeroRedundancyOptimizer over AdamW (the optimizer
state sharded over the ranks, the same decay groups).
"""
import argparse
import faulthandler
import json
import math
import os
import socket
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import build_from_weights, load_safetensors, model_config  # noqa: E402

TOL = 1e-4


def lr_at(o, step, total):
    if o["warmup_steps"] > 0 and step < o["warmup_steps"]:
        return o["lr"] * (step + 1) / o["warmup_steps"]
    min_lr = o["lr"] * o["min_lr_ratio"]
    progress = min(1.0, max(0.0, (step - o["warmup_steps"]) / max(1, total - o["warmup_steps"])))
    return min_lr + 0.5 * (o["lr"] - min_lr) * (1 + math.cos(math.pi * progress))


def ddp_rank(rank, world, port, workdir, steps, result, zero=False):
    faulthandler.enable()  # where a rank aborts, should it
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    with open(os.path.join(workdir, "config.yaml")) as f:
        full = yaml.safe_load(f)
    # PyYAML reads "1e-08" as a string (YAML 1.1 floats need a dot).
    cfg, o = model_config(full), {k: float(v) for k, v in full["optim"].items() if not isinstance(v, bool)}
    weights, _ = load_safetensors(os.path.join(workdir, "weights.safetensors"))
    batches, _ = load_safetensors(os.path.join(workdir, "batches.safetensors"))
    model = build_from_weights(cfg, weights)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
    decay = [p for n, p in model.named_parameters() if n.endswith("proj.weight") or n == "lm_head.weight"]
    rest = [p for n, p in model.named_parameters() if not (n.endswith("proj.weight") or n == "lm_head.weight")]
    groups = [{"params": decay, "weight_decay": o["weight_decay"]}, {"params": rest, "weight_decay": 0.0}]
    if zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW,
                                      lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    else:
        opt = torch.optim.AdamW(groups, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    losses = []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(o, step, full["train"]["steps"])
        opt.zero_grad()
        loss = ddp(batches[f"inputs.{step}.{rank}"], batches[f"targets.{step}.{rank}"])
        loss.backward()
        if o["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"])
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    if rank == 0:
        result.extend(losses)
    dist.destroy_process_group()
    # torch's gloo now and then aborts a rank while the interpreter tears down
    # ("terminate called without an active exception", SIGABRT, no Python
    # frame left): seen with Debian's torch 1.13 and with torch 2.15 on a
    # loaded host. The steps and their losses are done by now; the rank leaves
    # without that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="directory with weft-run and weft-reference-dump")
    ap.add_argument("--config", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--zero", action="store_true", help="PyTorch peer: DDP + ZeroRedundancyOptimizer")
    a = ap.parse_args()
    world = 2
    os.makedirs(a.workdir, exist_ok=True)
    subprocess.run([os.path.join(a.bin, "weft-reference-dump"), "--config", a.config, "--out", a.workdir,
                    "--batches", str(a.steps), "--world", str(world)], check=True)
    out = os.path.join(a.workdir, "weft-run")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    subprocess.run([os.path.join(a.bin, "weft-run"), "-n", str(world), a.config, "--out", out, "--no-resume",
                    "--steps", str(a.steps)], check=True, env=env)
    with open(os.path.join(out, "summary.json")) as f:
        weft_losses = json.load(f)["losses"]

    # The PyTorch peer is run once more if one of its ranks dies of a signal
    # (gloo's abort at teardown, above, should one come earlier). Any other
    # failure, and a second one, still fails the check.
    for attempt in (1, 2):
        with mp.Manager() as m:
            result = m.list()
            try:
                mp.spawn(ddp_rank, args=(world, free_port(), a.workdir, a.steps, result, a.zero), nprocs=world,
                         join=True)
            except mp.ProcessExitedException as e:
                if attempt == 2 or e.signal_name is None:
                    raise
                print(f"PyTorch peer: {e}; running it again")
                continue
            torch_losses = list(result)
            break

    worst = 0.0
    print("step  weft        torch       |diff|")
    for i, (w, t) in enumerate(zip(weft_losses, torch_losses)):
        worst = max(worst, abs(w - t))
        print(f"{i + 1:4d}  {w:.8f}  {t:.8f}  {abs(w - t):.2e}")
    if len(weft_losses) != a.steps or len(torch_losses) != a.steps:
        print(f"FAILED: expected {a.steps} losses, got weft {len(weft_losses)}, torch {len(torch_losses)}")
        return 1
    print(f"worst |loss difference| over {a.steps} steps: {worst:.2e} (tolerance {TOL:.0e})")
    if worst >= TOL:
        print("FAILED")
        return 1
    print("weft ZeRO matches PyTorch DDP + ZeroRedundancyOptimizer" if a.zero
          else "weft data parallelism matches PyTorch DDP")
    return 0


if __name__ == "__main__":
    sys.exit(main())
