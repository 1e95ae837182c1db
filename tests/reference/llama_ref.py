"""PyTorch reference of weft's Llama decoder (Hugging Face LlamaForCausalLM
semantics and tensor names), built from weft's safetensors files.

Written independently of the C++ code from the published Llama definition:
RMSNorm, rotary embeddings with rotate_half (optionally with Llama 3's
frequency scaling, as transformers' _compute_llama3_parameters), grouped-query
attention via repeat_kv with any head_dim, SwiGLU MLP, mean cross-entropy. Used
by the gradient check and the DDP/throughput baselines.
"""
import json
import math
import struct

import torch
import torch.nn.functional as F

_DTYPES = {"F32": torch.float32, "I32": torch.int32, "BF16": torch.bfloat16, "U16": torch.int16}


def load_safetensors(path):
    """Returns ({name: tensor}, metadata) without the safetensors package."""
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + hlen])
    meta = header.pop("__metadata__", {})
    base = 8 + hlen
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        buf = bytearray(data[base + b : base + end])
        t = torch.frombuffer(buf, dtype=_DTYPES[e["dtype"]]) if buf else torch.empty(0, dtype=_DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).clone()
    return out, meta


def save_safetensors(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    inv = {v: k for k, v in _DTYPES.items()}
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": inv[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def llama3_inv_freq(inv_freq, s):
    """transformers' _compute_llama3_parameters on a default inv_freq."""
    factor, low_freq_factor, high_freq_factor = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_context_len = s["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rope_cos_sin(T, D, theta, dtype, rope_scaling=None):
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    if rope_scaling:
        inv_freq = llama3_inv_freq(inv_freq, rope_scaling)
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        C, H, Hkv = c["d_model"], c["n_heads"], c["n_kv_heads"]
        D = c.get("head_dim") or C // H
        self.H, self.Hkv, self.D = H, Hkv, D
        self.input_layernorm = RMSNorm(C, c["norm_eps"])
        self.post_attention_layernorm = RMSNorm(C, c["norm_eps"])
        self.self_attn = torch.nn.Module()
        self.self_attn.q_proj = torch.nn.Linear(C, H * D, bias=False)
        self.self_attn.k_proj = torch.nn.Linear(C, Hkv * D, bias=False)
        self.self_attn.v_proj = torch.nn.Linear(C, Hkv * D, bias=False)
        self.self_attn.o_proj = torch.nn.Linear(H * D, C, bias=False)
        self.mlp = torch.nn.Module()
        F_ = c["ffn"]
        self.mlp.gate_proj = torch.nn.Linear(C, F_, bias=False)
        self.mlp.up_proj = torch.nn.Linear(C, F_, bias=False)
        self.mlp.down_proj = torch.nn.Linear(F_, C, bias=False)

    def forward(self, x, cos, sin, mask=None):
        B, T, C = x.shape
        h = self.input_layernorm(x)
        a = self.self_attn
        q = a.q_proj(h).view(B, T, self.H, self.D).transpose(1, 2)
        k = a.k_proj(h).view(B, T, self.Hkv, self.D).transpose(1, 2)
        v = a.v_proj(h).view(B, T, self.Hkv, self.D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.H // self.Hkv
        k = k.repeat_interleave(rep, dim=1)  # repeat_kv
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.D)
        if mask is None:
            mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, self.H * self.D)
        x = x + a.o_proj(y)
        h = self.post_attention_layernorm(x)
        m = self.mlp
        return x + m.down_proj(F.silu(m.gate_proj(h)) * m.up_proj(h))


class LlamaRef(torch.nn.Module):
    """Config keys: vocab_size d_model n_layers n_heads n_kv_heads ffn
    rope_theta norm_eps tie_embeddings, optionally head_dim (default
    d_model // n_heads), rope_scaling (llama3: factor, low_freq_factor,
    high_freq_factor, original_max_position_embeddings) and eos_token (packed
    documents: each eos token ends one; None: one causal sequence a row)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(c["vocab_size"], c["d_model"])
        self.model.layers = torch.nn.ModuleList([Block(c) for _ in range(c["n_layers"])])
        self.model.norm = RMSNorm(c["d_model"], c["norm_eps"])
        if not c["tie_embeddings"]:
            self.lm_head = torch.nn.Linear(c["d_model"], c["vocab_size"], bias=False)

    def forward(self, inputs, targets):
        B, T = inputs.shape
        x = self.model.embed_tokens(inputs.long())
        D = self.c.get("head_dim") or self.c["d_model"] // self.c["n_heads"]
        cos, sin = rope_cos_sin(T, D, self.c["rope_theta"], x.dtype, self.c.get("rope_scaling"))
        mask = None
        if self.c.get("eos_token") is not None:
            # Packed documents: each eos ends its document. doc[b, t] counts
            # the eos tokens before t; attention only within a document, and
            # positions (position_ids) counted from the document's start.
            is_eos = (inputs.long() == self.c["eos_token"]).long()
            doc = torch.cumsum(is_eos, dim=1) - is_eos
            t = torch.arange(T)
            same = doc[:, :, None] == doc[:, None, :]
            mask = (~same | (t[None, :] > t[:, None])[None]).unsqueeze(1)  # [B, 1, T, T]: disallowed
            start = torch.stack([torch.stack([(doc[b] == doc[b, i]).nonzero()[0, 0] for i in range(T)])
                                 for b in range(B)])
            pos = t[None, :] - start  # [B, T]
            cos, sin = cos[pos].unsqueeze(1), sin[pos].unsqueeze(1)  # [B, 1, T, D]
        for blk in self.model.layers:
            x = blk(x, cos, sin, mask)
        x = self.model.norm(x)
        w = self.model.embed_tokens.weight if self.c["tie_embeddings"] else self.lm_head.weight
        logits = x @ w.t()
        return F.cross_entropy(logits.view(B * T, -1).float(), targets.long().view(-1))


def model_config(cfg_yaml):
    """weft's resolved config (to_yaml output) -> LlamaRef config."""
    m = cfg_yaml["model"]
    ffn = m.get("ffn_hidden", 0) or (8 * m["d_model"] // 3 + 31) // 32 * 32
    return {
        "vocab_size": m["vocab_size"], "d_model": m["d_model"], "n_layers": m["n_layers"],
        "n_heads": m["n_heads"], "n_kv_heads": m["n_kv_heads"], "ffn": ffn,
        "rope_theta": float(m["rope_theta"]), "norm_eps": float(m["norm_eps"]),
        "tie_embeddings": bool(m["tie_embeddings"]),
        "head_dim": m.get("head_dim", 0) or m["d_model"] // m["n_heads"],
        "rope_scaling": rope_scaling(m.get("rope_scaling") or {}),
        "eos_token": eos_token(cfg_yaml.get("data") or {}),
    }


def eos_token(d):
    """weft's data.document_boundaries / eos_token -> the token ending packed documents, or None."""
    if d.get("document_boundaries", "none") == "none":
        return None
    if d["document_boundaries"] != "eos":
        raise SystemExit(f"the reference implements document_boundaries none and eos, not {d['document_boundaries']!r}")
    return int(d["eos_token"])


def rope_scaling(s):
    """weft's model.rope_scaling -> the llama3 parameters, or None (unscaled)."""
    t = s.get("rope_type", "default")
    if t == "default":
        return None
    if t != "llama3":
        raise SystemExit(f"the reference implements rope_type default and llama3, not {t!r}")
    return {k: float(s[k]) for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}


def build_from_weights(cfg, weights, dtype=torch.float32):
    model = LlamaRef(cfg).to(dtype)
    state = {k: v.to(dtype) for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight" or not cfg["tie_embeddings"]]:
        raise SystemExit(f"weights do not match the model: missing {missing}, unexpected {unexpected}")
    return model
