#!/usr/bin/env python3
"""PyTorch DDP peer for the data-parallel benchmark: the same Llama
(llama_ref.py), per-rank batch, AdamW and thread count, 2 ranks over gloo.
With --zero the optimizer is torch.distributed.optim.ZeroRedundancyOptimizer
(the ZeRO peer); with --compile the DDP module is torch.compile'd (the
compile happens in the first steps, which are not counted). Prints one JSON
line with the median step seconds of rank 0."""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from llama_ref import LlamaRef, model_config  # noqa: E402


def rank_main(rank, world, port, a, out):
    torch.set_num_threads(a.threads)
    torch.manual_seed(rank)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    with open(a.config) as f:
        full = yaml.safe_load(f)
    cfg, tr = model_config(full), full["train"]
    model = LlamaRef(cfg)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_cap_mb)
    if a.compile:
        ddp = torch.compile(ddp)
    if a.zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    B, T, V = tr["micro_batch"], tr["seq_len"], cfg["vocab_size"]
    times = []
    for _ in range(a.steps):
        x = torch.randint(0, V, (B, T), dtype=torch.int32)
        y = torch.randint(0, V, (B, T), dtype=torch.int32)
        t0 = time.perf_counter()
        opt.zero_grad()
        ddp(x, y).backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        out.append(statistics.median(times[3:]))
    dist.destroy_process_group()
    # gloo now and then aborts a rank at interpreter teardown (see
    # tests/reference/ddp_crosscheck.py); the timings are delivered by now.
    sys.stdout.flush()
    os._exit(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bucket-cap-mb", type=float, default=25)
    ap.add_argument("--zero", action="store_true", help="ZeroRedundancyOptimizer over AdamW")
    ap.add_argument("--compile", action="store_true", help="torch.compile the DDP model")
    ap.add_argument("--clip", type=float, default=1.0, help="global grad-norm clip, 0 = none")
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as m:
        out = m.list()
        mp.spawn(rank_main, args=(2, port, a, out), nprocs=2, join=True)
        print(json.dumps({"median_step_seconds": out[0]}))


if __name__ == "__main__":
    main()
