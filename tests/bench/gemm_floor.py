#!/usr/bin/env python3
"""The matmul floor of one training step: the time of the forward and backward
matrix products of weft's Llama step alone (the shapes and transposes of
worker/model/llama.cc: q, k, v, o, gate, up, down per layer and lm_head; for
backward the data and weight gradients), one thread, through torch.mm on the
same OpenBLAS that weft and PyTorch DDP use on this machine. Everything else a
step does (attention, norms, RoPE, SwiGLU, the loss, AdamW, gradient sync)
comes on top, for weft and DDP alike, so a step can be no faster than this.

Prints the floor next to the step times it bounds when given them
(--weft-ms, --ddp-ms), and what a target ratio to DDP leaves for the rest.

usage: /usr/bin/python3 tests/bench/gemm_floor.py [--model 13.7m|gpt2-124m]
       [--tokens 512] [--reps 5] [--weft-ms 607 --ddp-ms 641]
"""
import argparse
import os
import statistics
import time

# One thread, as each rank of dp_step_time.py: OpenBLAS sizes its own pool
# from these at load, whatever torch.set_num_threads says later.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"
import torch  # noqa: E402

MODELS = {  # as tests/bench/dp_step_time.py's MODELS (ffn_hidden resolved)
    "13.7m": dict(vocab=2048, d=512, layers=4, heads=8, kv_heads=4, ffn=1376),
    "gpt2-124m": dict(vocab=50304, d=768, layers=12, heads=12, kv_heads=12, ffn=2048),
}


def step_products(m, n):
    """(M, N, K) of every product of one step for n tokens: forward y = x W^T,
    backward dx = dy W and dW += dy^T x, each 2 M N K flops."""
    d, hd = m["d"], m["d"] // m["heads"]
    outs = [d, m["kv_heads"] * hd, m["kv_heads"] * hd, d, m["ffn"], m["ffn"]]  # q k v o gate up
    ins = [d, d, d, d, d, d]
    linears = list(zip(outs, ins)) + [(d, m["ffn"])]  # down
    linears = linears * m["layers"] + [(m["vocab"], d)]  # lm_head
    prods = []
    for out, inp in linears:
        prods += [("fwd", n, out, inp), ("dx", n, inp, out), ("dw", out, inp, n)]
    return prods


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), default="13.7m")
    ap.add_argument("--tokens", type=int, default=512, help="tokens per rank and step (4 x 128 in dp_step_time.py)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--weft-ms", type=float)
    ap.add_argument("--ddp-ms", type=float)
    a = ap.parse_args()
    torch.set_num_threads(1)
    m = MODELS[a.model]
    prods = step_products(m, a.tokens)
    # Operands laid out as llama.cc passes them (row-major, same transposes).
    mats = []
    for kind, M, N, K in prods:
        if kind == "fwd":    # y[n,out] = x[n,in] W[out,in]^T
            x, w = torch.randn(M, K), torch.randn(N, K)
            mats.append((kind, x, w, torch.empty(M, N)))
        elif kind == "dx":   # dx[n,in] = dy[n,out] W[out,in]
            dy, w = torch.randn(M, K), torch.randn(K, N)
            mats.append((kind, dy, w, torch.empty(M, N)))
        else:                # dW[out,in] += dy[n,out]^T x[n,in]
            dy, x = torch.randn(K, M), torch.randn(K, N)
            mats.append((kind, dy, x, torch.zeros(M, N)))

    def one_step():
        for kind, p, q, out in mats:
            if kind == "fwd":
                torch.mm(p, q.t(), out=out)
            elif kind == "dx":
                torch.mm(p, q, out=out)
            else:
                out.addmm_(p.t(), q)

    one_step()
    times = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        one_step()
        times.append(time.perf_counter() - t0)
    floor = statistics.median(times) * 1e3
    flops = sum(2 * M * N * K for _, M, N, K in prods)
    print(f"model {a.model}, {a.tokens} tokens, {len(prods)} products, {flops / 1e9:.1f} GFLOP per step, "
          f"1 thread ({torch.__version__}, {torch.backends.mkldnn.is_available() and 'mkldnn present' or 'no mkldnn'})")
    print(f"matmul floor: {floor:.0f} ms per step (median of {a.reps}; {flops / floor / 1e6:.1f} GFLOP/s)")
    if a.ddp_ms:
        print(f"floor / DDP step ({a.ddp_ms:.0f} ms): {floor / a.ddp_ms:.2f}")
        print(f"0.8x DDP = {0.8 * a.ddp_ms:.0f} ms leaves {0.8 * a.ddp_ms - floor:.0f} ms for everything but the "
              f"matmuls; DDP spends {a.ddp_ms - floor:.0f} ms on it")
    if a.weft_ms:
        print(f"weft step ({a.weft_ms:.0f} ms): {a.weft_ms - floor:.0f} ms beyond the matmuls")


if __name__ == "__main__":
    main()
