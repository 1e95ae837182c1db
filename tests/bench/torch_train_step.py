#!/usr/bin/env python3
"""PyTorch peer of weft's single-process training step, for benchmarks:
the same Llama (tests/reference/llama_ref.py), batch, AdamW settings and
thread count, eager or with --compile (torch.compile of the model, Inductor's
C++/OpenMP code on the CPU; the compile happens in the warm-up steps, which
are not counted). Prints one JSON line: median step seconds, peak RSS, and
the seconds the first step took (the compile, with --compile)."""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from llama_ref import LlamaRef, model_config  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, help="weft-worker --print-config output")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    with open(a.config) as f:
        full = yaml.safe_load(f)
    cfg = model_config(full)
    tr = full["train"]
    op = {k: float(v) for k, v in full["optim"].items() if not isinstance(v, bool)}
    model = LlamaRef(cfg)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=float(full["model"]["init_std"])) if p.dim() > 1 else None
    decay = [p for n, p in model.named_parameters() if p.dim() > 1 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() > 1 and "embed" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": op["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=op["lr"], betas=(op["beta1"], op["beta2"]), eps=op["eps"])
    fwd = torch.compile(model) if a.compile else model
    B, T, V = tr["micro_batch"], tr["seq_len"], cfg["vocab_size"]
    times = []
    for _ in range(a.steps):
        x = torch.randint(0, V, (B, T), dtype=torch.int32)
        y = torch.randint(0, V, (B, T), dtype=torch.int32)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        for _ in range(tr["grad_accum"]):
            (fwd(x, y) / tr["grad_accum"]).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), op["grad_clip"])
        opt.step()
        times.append(time.perf_counter() - t0)
    warm = times[2:] if len(times) > 3 else times[1:]
    print(json.dumps({"median_step_seconds": statistics.median(warm), "first_step_seconds": times[0],
                      "torch": torch.__version__, "compiled": a.compile,
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "tokens_per_step": B * T * tr["grad_accum"]}))


if __name__ == "__main__":
    main()
