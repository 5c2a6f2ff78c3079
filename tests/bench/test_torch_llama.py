"""bench/torch_llama.py, the decode peer: feeding a sequence in pieces through its
hand-kept KV cache gives what one stateless call on the whole sequence gives, so the
peer's decode steps compute the same block as its prefill (and as layerserve's
sessions)."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import torch_llama  # noqa: E402

SHAPE = torch_llama.Shape(hidden=32, heads=4, kv_heads=2, theta=500000.0, eps=1e-5)


def layers(count, ffn=48):
    g = torch.Generator().manual_seed(0)
    d, kv = SHAPE.hidden, SHAPE.kv_heads * SHAPE.head_dim

    def w(out, inp):
        return torch.randn(out, inp, generator=g) * inp ** -0.5

    return [dict(q=w(d, d), k=w(kv, d), v=w(kv, d), o=w(d, d), gate=w(ffn, d),
                 up=w(ffn, d), down=w(d, ffn), n1=1 + 0.1 * torch.randn(d, generator=g),
                 n2=1 + 0.1 * torch.randn(d, generator=g)) for _ in range(count)]


def test_pieces_through_the_cache_match_one_call():
    stack = layers(2)
    x = torch.randn(3, 9, SHAPE.hidden, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        whole = torch_llama.forward(x, stack, [[], []], 0, SHAPE)
        caches = [[], []]
        pieces, start = [], 0
        for size in (4, 3, 1, 1):  # A prefill, a chunk after it, then decode steps.
            pieces.append(torch_llama.forward(x[:, start:start + size], stack, caches,
                                              start, SHAPE))
            start += size
    torch.testing.assert_close(torch.cat(pieces, 1), whole, rtol=1e-5, atol=1e-5)
    assert caches[0][0].shape == (3, SHAPE.kv_heads, 9, SHAPE.head_dim)


def test_a_token_sees_no_later_token():
    stack = layers(1)
    x = torch.randn(1, 5, SHAPE.hidden, generator=torch.Generator().manual_seed(2))
    changed = x.clone()
    changed[:, 3:] += 1
    with torch.no_grad():
        a = torch_llama.forward(x, stack, [[]], 0, SHAPE)
        b = torch_llama.forward(changed, stack, [[]], 0, SHAPE)
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])
