"""The PyTorch eager peer of a stack of Llama blocks with a hand-kept KV cache, as
Hugging Face's eager attention computes it (RMSNorm, q/k/v/o projections,
rotate_half RoPE, causal softmax attention with GQA by repeating K/V, SwiGLU MLP),
for the decode benchmarks (bench/sessions_bench.py, bench/llama8b_bench.py).

A layer is a dict of torch tensors in the Hugging Face layout ([out, in]): q, k, v,
o, gate, up, down, and the norm weights n1 (input_layernorm), n2
(post_attention_layernorm).
"""
import dataclasses

import torch
import torch.nn.functional as F


@dataclasses.dataclass(frozen=True)
class Shape:
    hidden: int
    heads: int
    kv_heads: int
    theta: float = 10000.0
    eps: float = 1e-5

    @property
    def head_dim(self):
        return self.hidden // self.heads


def rms_norm(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rope(x, positions, shape):
    """rotate_half RoPE of x [B, H, T, dh] at positions [T]."""
    dh = shape.head_dim
    inv_freq = 1.0 / (shape.theta ** (torch.arange(0, dh, 2).float() / dh))
    freqs = torch.outer(positions.float(), inv_freq)
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., :dh // 2], x[..., dh // 2:]
    return x * cos + torch.cat((-x2, x1), -1) * sin


def forward(x, layers, caches, start, shape):
    """x [B, T, hidden] at positions start .. start + T - 1 through `layers`. caches:
    one list per layer, [] or [keys, values] ([B, kv_heads, length, dh]), extended
    in place with this call's tokens (pass fresh [] lists for a stateless call)."""
    B, T, d = x.shape
    h, hk, dh = shape.heads, shape.kv_heads, shape.head_dim
    positions = torch.arange(start, start + T)
    for w, cache in zip(layers, caches):
        a = rms_norm(x, w["n1"], shape.eps)
        q = F.linear(a, w["q"]).view(B, T, h, dh).transpose(1, 2)
        k = F.linear(a, w["k"]).view(B, T, hk, dh).transpose(1, 2)
        v = F.linear(a, w["v"]).view(B, T, hk, dh).transpose(1, 2)
        q, k = rope(q, positions, shape), rope(k, positions, shape)
        if cache:
            k = torch.cat((cache[0], k), 2)
            v = torch.cat((cache[1], v), 2)
        cache[:] = [k, v]
        kk = k.repeat_interleave(h // hk, 1)
        vv = v.repeat_interleave(h // hk, 1)
        s = (q @ kk.transpose(-1, -2)) * dh ** -0.5
        if T > 1:  # Causal among the new tokens; every cached one is visible.
            s = s + torch.full((T, k.shape[2]), float("-inf")).triu(k.shape[2] - T + 1
                                                                    ).to(s.dtype)
        o = (s.float().softmax(-1).to(x.dtype) @ vv).transpose(1, 2).reshape(B, T, d)
        x = x + F.linear(o, w["o"])
        m = rms_norm(x, w["n2"], shape.eps)
        x = x + F.linear(F.silu(F.linear(m, w["gate"])) * F.linear(m, w["up"]), w["down"])
    return x
