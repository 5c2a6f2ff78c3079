"""numpy <-> Tensor helpers, bfloat16 bits against torch.bfloat16, and the small
pure helpers of the client (no server needed)."""
import numpy as np
import pytest
import torch

import layerserve_client as lc
from layerserve_client import pb
from layerserve_client.client import channel_target, rope_scaling
from layerserve_client.retry import RetryPolicy


def torch_bf16_bits(values):
    return (torch.from_numpy(np.asarray(values, dtype=np.float32)).to(torch.bfloat16)
            .view(torch.int16).numpy().view(np.uint16))


def f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


# float32 bit patterns at the edges of bfloat16 rounding.
EDGE_BITS = [
    0x00000000, 0x80000000,              # +-0
    0x7F800000, 0xFF800000,              # +-Inf
    0x7F7FFFFF, 0xFF7FFFFF,              # float32 max: rounds up to +-Inf
    0x7F7F0000,                          # bfloat16 max, exact
    0x7F7F7FFF,                          # just under the tie: stays bf16 max
    0x7F7F8000,                          # tie with odd kept part: up to Inf
    0x00800000, 0x80800000,              # smallest float32 normal
    0x00000001, 0x80000001,              # smallest float32 subnormal: to +-0
    0x00010000, 0x007F0000,              # bfloat16 subnormals, exact
    0x00008000, 0x00018000,              # subnormal ties: to even (0 and 0x0002)
    0x007FFFFF,                          # largest subnormal: up to smallest normal
    0x3F808000, 0x3F818000, 0x3F808001,  # ties 1 + 2^-8 (to even), odd, past the tie
    0xBF808000, 0xBF818000,              # the same, negative
    0x3F800000, 0x40490FDB, 0x3DCCCCCD,  # 1, pi, 0.1
]
NAN_BITS = [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF, 0xFF800001, 0x7F80FFFF,
            0x7F800100]  # quiet, negative, signaling with low payload only, ...


def test_bfloat16_pack_matches_torch_on_edge_values():
    values = f32(EDGE_BITS)
    ours = lc.float32_to_bfloat16_bits(values)
    theirs = torch_bf16_bits(values)
    for bits, a, b in zip(EDGE_BITS, ours, theirs):
        assert a == b, f"0x{bits:08X}: ours 0x{a:04X}, torch 0x{b:04X}"
    # Spot checks of the rules themselves, not only agreement.
    assert ours[EDGE_BITS.index(0x7F7FFFFF)] == 0x7F80
    assert ours[EDGE_BITS.index(0x3F808000)] == 0x3F80
    assert ours[EDGE_BITS.index(0x3F818000)] == 0x3F82
    assert ours[EDGE_BITS.index(0x00018000)] == 0x0002


def test_bfloat16_pack_keeps_nan_a_nan():
    values = f32(NAN_BITS)
    ours = lc.float32_to_bfloat16_bits(values)
    assert np.all(np.isnan(lc.bfloat16_bits_to_float32(ours)))
    assert np.all(np.isnan(torch.from_numpy(values).to(torch.bfloat16).float().numpy()))
    # Sign and top payload bits kept, quiet bit set (as the server's common/dtype.cc).
    want = [(b >> 16) | 0x0040 for b in NAN_BITS]
    assert ours.tolist() == want


def test_bfloat16_pack_matches_torch_on_random_bit_patterns():
    bits = np.random.default_rng(1).integers(0, 2**32, size=200_000, dtype=np.uint64)
    values = bits.astype(np.uint32).view(np.float32)
    values = values[~np.isnan(values)]
    np.testing.assert_array_equal(lc.float32_to_bfloat16_bits(values),
                                  torch_bf16_bits(values))


def test_bfloat16_unpack_matches_torch_on_every_pattern():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    ours = lc.bfloat16_bits_to_float32(bits)
    theirs = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).float().numpy()
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))


def test_bfloat16_keeps_shape_and_handles_scalars():
    a = np.arange(6, dtype=np.float32).reshape(2, 3) + 0.5
    assert lc.float32_to_bfloat16_bits(a).shape == (2, 3)
    assert lc.float32_to_bfloat16_bits(np.float32(1.5)).shape == ()
    np.testing.assert_array_equal(lc.round_to_bfloat16(a), a)  # exact in bf16


@pytest.mark.parametrize("dtype,wire,fmt", [("float32", pb.FLOAT32, "<f4"),
                                            ("float16", pb.FLOAT16, "<f2"),
                                            (None, pb.FLOAT32, "<f4")])
def test_to_tensor_is_little_endian_row_major(dtype, wire, fmt):
    a = np.arange(12, dtype=">f8").reshape(3, 4) / 8  # big-endian float64 in
    tensor = lc.to_tensor(a, dtype)
    assert list(tensor.shape) == [3, 4] and tensor.dtype == wire
    assert tensor.data == a.astype(fmt).tobytes()
    back = lc.from_tensor(tensor)
    assert back.dtype == np.float32 and back.shape == (3, 4)
    np.testing.assert_array_equal(back, a)
    back[0, 0] = 7  # Writable: a copy, not a view of the message's bytes.


def test_to_tensor_bfloat16_bytes():
    a = np.array([[1.0, -2.0], [np.inf, 1.00390625]], dtype=np.float32)
    tensor = lc.to_tensor(a, "bfloat16")
    assert tensor.dtype == pb.BFLOAT16
    assert tensor.data == bytes([0x80, 0x3F, 0x00, 0xC0, 0x80, 0x7F, 0x80, 0x3F])
    np.testing.assert_array_equal(lc.from_tensor(tensor), [[1, -2], [np.inf, 1]])


def test_to_tensor_picks_float16_for_float16_arrays():
    a = np.array([1.5, 65504, -0.0001], dtype=np.float16)
    tensor = lc.to_tensor(a)
    assert tensor.dtype == pb.FLOAT16 and tensor.data == a.astype("<f2").tobytes()
    np.testing.assert_array_equal(lc.from_tensor(tensor), a.astype(np.float32))


@pytest.mark.parametrize("array,message", [
    (np.float32(3), "x: needs rank >= 1, got a scalar"),
    (np.zeros((2, 0)), "x.shape: every dimension must be >= 1, got [2, 0]"),
    (np.ones(3, np.complex64), "x: needs real numbers, got dtype complex64"),
    (np.array(["a"]), "x: needs real numbers"),
])
def test_to_tensor_shape_checks(array, message):
    with pytest.raises(ValueError) as error:
        lc.to_tensor(array, name="x")
    assert message in str(error.value)


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        lc.to_tensor([1.0], "int8")


def test_from_tensor_checks_byte_count():
    with pytest.raises(ValueError) as error:
        lc.from_tensor(pb.Tensor(shape=[3, 5], dtype=pb.FLOAT32, data=b"\0" * 56), "out")
    assert str(error.value) == "out.data: shape [3, 5] FLOAT32 needs 60 bytes, got 56"
    with pytest.raises(ValueError, match="DATA_TYPE_UNSPECIFIED"):
        lc.from_tensor(pb.Tensor(shape=[1], data=b"\0" * 4))


def test_channel_target():
    assert channel_target("localhost:50051") == "localhost:50051"
    assert channel_target(["127.0.0.1:1", "127.0.0.2:2"]) == "ipv4:127.0.0.1:1,127.0.0.2:2"
    assert channel_target(["[::1]:1", "[::1]:2"]) == "ipv6:[::1]:1,[::1]:2"
    with pytest.raises(ValueError, match="DNS name"):
        channel_target(["a.example:1", "b.example:2"])
    with pytest.raises(ValueError, match="all be IPv4 or all IPv6"):
        channel_target(["127.0.0.1:1", "[::1]:2"])


def test_rope_scaling_takes_a_hugging_face_config_entry():
    s = rope_scaling({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    assert s.type == pb.RopeScaling.LLAMA3 and s.factor == 8.0
    assert s.original_max_position_embeddings == 8192
    assert s.HasField("low_freq_factor") and not s.HasField("beta_fast")
    assert rope_scaling({"type": "dynamic", "factor": 2.0}).type == pb.RopeScaling.DYNAMIC_NTK
    assert rope_scaling({"type": "YARN", "factor": 4.0, "beta_fast": None}).type == \
        pb.RopeScaling.YARN
    with pytest.raises(lc.LayerServeError) as error:
        rope_scaling({"type": "yarn", "factor": 4.0, "mscale": 1.0})
    assert "unknown fields ['mscale']" in error.value.details


def test_retry_policy_backoff_is_capped_exponential_with_full_jitter():
    policy = RetryPolicy(max_attempts=6, initial_backoff=0.1, max_backoff=0.5, multiplier=2)
    assert [policy.backoff_cap(n) for n in range(1, 6)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    import random
    rng = random.Random(4)
    waits = [policy.backoff(3, rng) for _ in range(2000)]
    assert 0 <= min(waits) < 0.02 and 0.38 < max(waits) <= 0.4  # spread over [0, cap]
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
