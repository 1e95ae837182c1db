#!/usr/bin/env python3
"""What the run fingerprint's content identity costs on a 1.1 B-parameter
init_from (docs/user-guide/worker-config.md, "Settings every rank shares").

Writes a TinyLlama-1.1B-shaped Hugging Face directory (config.json and one
model.safetensors of random weights, BF16 and F32) under a temporary
directory, then times `weft-worker --init-from DIR --print-config`, which
computes the run fingerprint as a rank does at the rendezvous, against the
same command on the 119 k-parameter test fixture (process start and config
parsing). Each is timed warm (the file in the page cache) and cold (its pages
dropped with posix_fadvise(DONTNEED) first). For comparison it times a whole
file CRC-32 (zlib, 16 MiB reads): what hashing every byte would cost.
The directory is removed at the end.

Usage: tests/bench/fingerprint_cost.py [--build BUILD] [--repeat N]
"""
import argparse
import json
import os
import platform
import struct
import subprocess
import sys
import tempfile
import time
import zlib
import shutil

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(SRC, "tests/testdata/hf-llama/gqa-untied")

# TinyLlama-1.1B: 22 layers, d_model 2048, 32 heads / 4 KV heads, ffn 5632,
# vocab 32000, untied.
D, FFN, LAYERS, HEADS, KV, VOCAB = 2048, 5632, 22, 32, 4, 32000
HEAD_DIM = D // HEADS


def tensors():
    yield "model.embed_tokens.weight", [VOCAB, D]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", [D]
        yield p + "self_attn.q_proj.weight", [D, D]
        yield p + "self_attn.k_proj.weight", [KV * HEAD_DIM, D]
        yield p + "self_attn.v_proj.weight", [KV * HEAD_DIM, D]
        yield p + "self_attn.o_proj.weight", [D, D]
        yield p + "post_attention_layernorm.weight", [D]
        yield p + "mlp.gate_proj.weight", [FFN, D]
        yield p + "mlp.up_proj.weight", [FFN, D]
        yield p + "mlp.down_proj.weight", [D, FFN]
    yield "model.norm.weight", [D]
    yield "lm_head.weight", [VOCAB, D]


def write_model(dir_, dtype):
    os.makedirs(dir_)
    with open(os.path.join(FIXTURE, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(hidden_size=D, intermediate_size=FFN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
               num_key_value_heads=KV, head_dim=HEAD_DIM, vocab_size=VOCAB, max_position_embeddings=2048,
               dtype={"BF16": "bfloat16", "F32": "float32"}[dtype])
    with open(os.path.join(dir_, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    size = {"BF16": 2, "F32": 4}[dtype]
    header, at, params = {}, 0, 0
    for name, shape in tensors():
        n = 1
        for s in shape:
            n *= s
        params += n
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + n * size]}
        at += n * size
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    # Random bytes (not a sparse file: the cold reads must reach the disk).
    block = os.urandom(64 << 20)
    with open(os.path.join(dir_, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        left = at
        while left:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
        f.flush()
        os.fsync(f.fileno())
    return params, 8 + len(h) + at


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(cmd):
    t0 = time.monotonic()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}")
    return dt


def crc_file(path):
    t0 = time.monotonic()
    crc = 0
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(16 << 20):
            crc = zlib.crc32(chunk, crc)
    return time.monotonic() - t0


def best(xs):
    return f"min {min(xs):.3f} s, median {sorted(xs)[len(xs) // 2]:.3f} s"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    worker = os.path.join(args.build, "bin", "weft-worker")
    rev = subprocess.run(["git", "-C", SRC, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    print(f"# weft {rev.strip()} on {os.cpu_count()} cores, {platform.release()}; repeat {args.repeat}")
    base = [timed([worker, "--init-from", FIXTURE, "--print-config"]) for _ in range(args.repeat)]
    print(f"print-config, 119k-param fixture (process start, config): {best(base)}")
    tmp = tempfile.mkdtemp(prefix="weft-fp-bench-")
    try:
        for dtype in ("BF16", "F32"):
            d = os.path.join(tmp, dtype.lower())
            t0 = time.monotonic()
            params, size = write_model(d, dtype)
            print(f"\n{dtype}: {params / 1e9:.3f} B parameters, model.safetensors {size / 1e9:.2f} GB "
                  f"(written in {time.monotonic() - t0:.1f} s)")
            weights = os.path.join(d, "model.safetensors")
            cmd = [worker, "--init-from", d, "--print-config"]
            warm = [timed(cmd) for _ in range(args.repeat)]
            cold = []
            for _ in range(args.repeat):
                drop_cache(weights)
                cold.append(timed(cmd))
            print(f"  print-config with content identity, warm: {best(warm)}")
            print(f"  print-config with content identity, cold: {best(cold)}")
            crc_warm = [crc_file(weights) for _ in range(2)]  # the first run fills the cache
            crc_cold = []
            for _ in range(2):
                drop_cache(weights)
                crc_cold.append(crc_file(weights))
            print(f"  whole-file CRC-32 (the alternative), warm: {best(crc_warm[1:])}, "
                  f"{size / min(crc_warm[1:]) / 1e9:.2f} GB/s")
            print(f"  whole-file CRC-32 (the alternative), cold: {best(crc_cold)}, "
                  f"{size / min(crc_cold) / 1e9:.2f} GB/s")
            shutil.rmtree(d)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
