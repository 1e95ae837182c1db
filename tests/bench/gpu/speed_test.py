#!/usr/bin/env python3
"""The GPU speed harness's CPU parts (tests/bench/gpu/speed.py), on any
machine: the batches PyTorch trains on are exported by weft-reference-dump
--batches-only from the shard weft reads (that weft trains on exactly these
is what the GPU run's loss agreement with PyTorch eager shows), the
statistics over repeats, the loss agreement, both MFU figures, and the JSON
and table it writes.

usage: python3 speed_test.py BIN_DIR
"""
import json, os, struct, subprocess, sys, tempfile
from array import array
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import speed  # noqa: E402

failures = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def read_safetensors_i32(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        v = array("i")
        v.frombytes(data[a:b])
        out[name] = (t["shape"], v)
    return out


def test_batches(bin_dir, work):
    # A shard of known tokens: token i is i mod 251, so every window names where it starts.
    shard = os.path.join(work, "shard.bin")
    n = 50000
    header = array("i", [20240520, 1, n] + [0] * 253)
    with open(shard, "wb") as f:
        f.write(header.tobytes())
        f.write(array("H", [i % 251 for i in range(n)]).tobytes())
    model = os.path.join(work, "model")
    os.makedirs(model)
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
                   "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
                   "rope_theta": 10000.0, "tie_word_embeddings": False}, f)
    c = dict(model="x", mb=2, seq=16, warmup=1, steps=3)
    args = SimpleNamespace(bin=bin_dir, work=work)
    path = speed.export_batches(args, "tiny", c, model, shard)
    b = read_safetensors_i32(path)
    n = max(4, speed.AGREE_STEPS + 1)
    expect(sorted(b) == sorted(f"{k}.{s}.0" for k in ("inputs", "targets") for s in range(n)),
           f"one batch per step of warm-up and timing, or of the agreement: {sorted(b)[:4]}...")
    shape, x = b["inputs.0.0"]
    _, y = b["targets.0.0"]
    expect(shape == [2, 16], f"batch shape [mb, seq]: {shape}")
    expect(all(y[i] == (x[i] + 1) % 251 for i in range(16)), "targets are the next tokens of the shard")
    steps = [tuple(b[f"inputs.{s}.0"][1][:1]) for s in range(n)]
    expect(len(set(steps)) > 1, f"steps read different windows: {steps}")
    again = speed.export_batches(args, "tiny", c, model, shard)
    expect(again == path, "a second export reuses the file")


def test_figures(work):
    runs = [{"step_ms": 12.0, "peak_bytes": 5 << 20, "loss": 2.0, "losses": [5.0, 4.0, 3.0, 2.5, 2.0, 1.9]},
            {"step_ms": 10.0, "peak_bytes": 6 << 20, "loss": 2.0, "losses": [5.0, 4.0, 3.0, 2.5, 2.0, 1.9]},
            {"step_ms": 11.0, "peak_bytes": 4 << 20, "loss": 2.0, "losses": [5.0, 4.0, 3.0, 2.5, 2.0, 1.9]}]
    s = speed.summarize({"runs": runs})
    expect((s["step_ms"], s["step_ms_min"], s["step_ms_max"]) == (11.0, 10.0, 12.0), "median, min, max over runs")
    expect(s["peak_bytes"] == 6 << 20, "peak memory is the highest run's")
    failed = speed.summarize({"runs": [{"error": "x exited 1"}]})
    expect(failed.get("error") == "x exited 1", "a contestant whose runs all failed reports the error")
    moving = [5.0, 4.0, 3.0, 2.5, 2.0, 1.9]
    agree = speed.loss_agreement(moving, [5.02, 4.0, 3.0, 2.5, 2.0, 1.9])
    expect(agree["ok"] and abs(agree["max_rel_diff"] - 0.02 / 5.02) < 1e-12, f"loss agreement: {agree['max_rel_diff']}")
    expect(agree["discriminating"] and agree["shifted_max_rel_diff"] > 0.1, "its batch-shift control differs")
    far = speed.loss_agreement(moving, [6.0, 4, 3, 2.5, 2, 1.9])
    expect(not far["ok"], "a 17 % loss difference fails the agreement")
    shifted = speed.loss_agreement(moving[:-1], moving[1:])
    expect(not shifted["ok"], f"eager one batch ahead fails it: {shifted['max_rel_diff']:.3g}")
    flat = [10.86, 10.861, 10.859, 10.86, 10.862, 10.86]
    still = speed.loss_agreement(flat, flat)
    expect(not still["ok"] and not still["discriminating"],
           "losses that do not move fail as not discriminating (a batch shift would pass)")
    expect(not speed.loss_agreement([], [])["ok"] and not speed.loss_agreement([5.0], [5.0])["ok"],
           "no losses, or one, fail")
    expect(not speed.loss_agreement(moving, moving[:3])["ok"], "series of different lengths fail")
    m = speed.MODELS["llama-1b"]
    expect(speed.flops_per_token(m, 2048) - speed.flops_per_token(m, 2048, input_embedding=False)
           == 6 * m["vocab"] * m["d"], "untied: the input embedding's 6 V d FLOPs leave the second MFU")
    g = speed.MODELS["gpt2-124m"]
    expect(speed.flops_per_token(g, 1024) == speed.flops_per_token(g, 1024, input_embedding=False),
           "tied: the matrix is the LM head, counted in both")
    results = {"gpt2-124m-mb4": {"weft": dict(s, attention="cudnn (cuDNN 9)"), "compile": dict(s, step_ms=13.2, sdpa="flash"),
                                 "_loss_agreement": agree}}
    args = SimpleNamespace(json=os.path.join(work, "speed.json"), out=work)
    md = speed.write_results(args, {"weft": {"commit": "abc", "dirty": False}}, results, 800e12, ["x eager run 3"])
    written = json.load(open(os.path.join(work, "speed.json")))
    expect(written["not_run"] == ["x eager run 3"] and not written["complete"], "a cut run says what it did not run")
    expect(written["failed"] == [], f"nothing failed: {written['failed']}")
    bad = {"gpt2-124m-mb4": {"weft": {"runs": [{"error": "weft-worker exited 1"}]}, "_loss_agreement": still}}
    expect(len(speed.failed(bad)) == 2, f"a failed run and a failed agreement fail the phase: {speed.failed(bad)}")
    r = written["results"]["gpt2-124m-mb4"]
    expect(abs(r["weft"]["tokens_per_s"] - 4096 / 0.011) < 1e-6, "tokens/s from the median ms/step")
    expect("mfu_989_no_input_embedding" in r["weft"], "both MFU figures in the JSON")
    expect(written["info"]["weft"]["commit"] == "abc", "the weft commit in the JSON")
    expect("1.200x" in md and "weft vs eager" in md and "sdpa flash" in md, "the table: ratio, agreement, SDPA kernel")


def test_agreement_on_a_real_curve(bin_dir, work):
    """The agreement's negative control on losses weft really trains: on the
    harness's data (a chain over a few ids of a larger vocabulary) the loss
    moves from the first steps, so the same curve agrees with itself within
    bf16-sized noise and not with itself one batch later."""
    # speed.write_shard's chain (branching 4 over 256 ids), without numpy.
    import random
    rng = random.Random(1234)
    succ = [[rng.randrange(256) for _ in range(4)] for _ in range(256)]
    toks, cur = [0], 0
    for _ in range((1 << 16) - 1):
        cur = succ[cur][rng.randrange(4)]
        toks.append(cur)
    shard = os.path.join(work, "agree.bin")
    with open(shard, "wb") as f:
        f.write(array("i", [20240520, 1, len(toks)] + [0] * 253).tobytes())
        f.write(array("H", toks).tobytes())
    cfg = os.path.join(work, "agree.yaml")
    with open(cfg, "w") as f:
        f.write(f"""model: {{vocab_size: 4096, d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 128, max_seq_len: 64}}
train: {{steps: {speed.AGREE_STEPS}, micro_batch: 4, seq_len: 64, log_every: 0, dtype: bf16, out_dir: {work}/agree}}
data: {{source: shards, shards: "{shard}"}}
optim: {{lr: 3.0e-3, warmup_steps: 0, min_lr_ratio: 1.0}}
checkpoint: {{save: false, resume: false}}
metrics: {{port: 0}}
""")
    subprocess.run([os.path.join(bin_dir, "weft-worker"), cfg], check=True, capture_output=True)
    losses = json.load(open(os.path.join(work, "agree", "summary.json")))["losses"]
    expect(len(losses) == speed.AGREE_STEPS, f"{len(losses)} losses: {[round(x, 3) for x in losses]}")
    noisy = [x * (1 + 1e-3 * (-1) ** i) for i, x in enumerate(losses)]
    same = speed.loss_agreement(losses, noisy)
    expect(same["ok"] and same["discriminating"],
           f"the curve agrees with itself within bf16 noise: {same['max_rel_diff']:.2g}, shifted {same['shifted_max_rel_diff']:.2g}")
    shifted = speed.loss_agreement(losses[:-1], losses[1:])
    expect(not shifted["ok"], f"and not one batch later: {shifted['max_rel_diff']:.2g}")
    expect(not os.listdir(os.path.join(work, "agree", "checkpoints")) if os.path.isdir(os.path.join(work, "agree", "checkpoints")) else True,
           "checkpoint.save: false wrote no checkpoint")


def main():
    bin_dir = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as work:
        test_batches(bin_dir, work)
        test_figures(work)
        test_agreement_on_a_real_curve(bin_dir, work)
    if failures:
        sys.exit(f"{len(failures)} failed")
    print("all passed")


if __name__ == "__main__":
    main()
