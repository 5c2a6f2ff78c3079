#!/usr/bin/python3
"""Writes the seed corpus of every fuzz target into fuzz/corpus/<target>/.

A few small inputs per target, each valid or wrong in one named way, so libFuzzer
starts from every branch the target has. Deterministic: rerunning rewrites the same
bytes. The replay test (fuzz/replay_test.cc) checks each folder reaches both an
accepted and a rejected input.

  PYTHONPATH=build/python /usr/bin/python3 fuzz/make_corpus.py
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "testing"))
from inference import grpc_service_pb2 as oip  # noqa: E402
from oip import parameter  # noqa: E402  (tests/testing/oip.py)
from layerserve.v1 import layerserve_pb2 as pb  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
rng = np.random.default_rng(7)

DTYPES = {pb.FLOAT32: "<f4", pb.FLOAT16: "<f2"}


def tensor(shape, dtype=pb.FLOAT32, values=None):
    if values is None:
        values = rng.standard_normal(shape).astype("f4")
    values = np.asarray(values, "f4").reshape(shape)
    if dtype == pb.BFLOAT16:
        data = (values.view("<u4") >> 16).astype("<u2").tobytes()
    else:
        data = values.astype(DTYPES[dtype]).tobytes()
    return pb.Tensor(shape=shape, dtype=dtype, data=data)


def write(target, name, data):
    if not isinstance(data, (bytes, bytearray)):
        # Deterministic: map entries (ModelInferRequest.parameters) in key order.
        data = data.SerializeToString(deterministic=True)
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def normalize():
    t = "normalize"
    write(t, "layer_norm_f32", pb.NormalizeRequest(kind=pb.LAYER_NORM, input=tensor([2, 8])))
    write(t, "rms_norm_weight_bf16", pb.NormalizeRequest(
        kind=pb.RMS_NORM, input=tensor([3, 16], pb.BFLOAT16), weight=tensor([16]),
        epsilon=1e-5, weight_offset=True))
    write(t, "layer_norm_residual_f16", pb.NormalizeRequest(
        kind=pb.LAYER_NORM, input=tensor([2, 2, 4], pb.FLOAT16), weight=tensor([4]),
        bias=tensor([4]), residual=tensor([2, 2, 4], pb.FLOAT16), output_dtype=pb.FLOAT32))
    bad = tensor([3, 5])
    bad.data = bad.data[:-4]
    write(t, "short_data", pb.NormalizeRequest(kind=pb.RMS_NORM, input=bad))
    write(t, "no_kind", pb.NormalizeRequest(input=tensor([1, 4])))


def activate():
    t = "activate"
    write(t, "relu_f32", pb.ActivateRequest(activation=pb.RELU, input=tensor([4, 4])))
    write(t, "gelu_tanh_bf16", pb.ActivateRequest(
        activation=pb.GELU_TANH, input=tensor([5], pb.BFLOAT16), output_dtype=pb.FLOAT16))
    write(t, "swiglu_two_tensors", pb.ActivateRequest(
        activation=pb.SWIGLU, input=tensor([2, 6]), gate=tensor([2, 6])))
    write(t, "geglu_packed_f16", pb.ActivateRequest(
        activation=pb.GEGLU, input=tensor([3, 8], pb.FLOAT16)))
    write(t, "gate_shape_mismatch", pb.ActivateRequest(
        activation=pb.REGLU, input=tensor([2, 6]), gate=tensor([2, 5])))
    write(t, "no_activation", pb.ActivateRequest(input=tensor([2])))


def positional_encode():
    t = "positional_encode"
    P = pb.PositionalEncodeRequest
    write(t, "sinusoidal_table", P(sinusoidal=pb.Sinusoidal(num_positions=4, dim=8)))
    write(t, "sinusoidal_input_concat", P(sinusoidal=pb.Sinusoidal(
        input=tensor([1, 3, 8]), layout=pb.Sinusoidal.CONCATENATED, positions=[5, 1, 0])))
    write(t, "learned", P(learned=pb.Learned(
        input=tensor([2, 3, 4]), table=tensor([6, 4]), position_offset=2)))
    write(t, "learned_past_table", P(learned=pb.Learned(
        input=tensor([3, 4]), table=tensor([2, 4]))))
    write(t, "rope_gqa_llama3", P(rope=pb.Rope(
        query=tensor([1, 4, 3, 8]), key=tensor([1, 2, 3, 8], pb.BFLOAT16), theta=500000,
        scaling=pb.RopeScaling(type=pb.RopeScaling.LLAMA3, factor=8,
                               original_max_position_embeddings=8))))
    write(t, "rope_bthd_partial_yarn", P(rope=pb.Rope(
        query=tensor([2, 3, 2, 8]), layout=pb.Rope.BTHD, rotary_dim=4,
        style=pb.Rope.INTERLEAVED, positions=[0, 7, 9],
        scaling=pb.RopeScaling(type=pb.RopeScaling.YARN, factor=4,
                               original_max_position_embeddings=4))))
    write(t, "alibi_bias", P(alibi=pb.Alibi(num_heads=3, query_length=2, key_length=5,
                                            query_offset=3)))
    write(t, "alibi_scores", P(alibi=pb.Alibi(scores=tensor([1, 2, 3, 3]), symmetric=True)))
    write(t, "t5_bias", P(t5_bias=pb.T5Bias(
        table=tensor([8, 2]), num_buckets=8, max_distance=16, query_length=3, key_length=4,
        bidirectional=True)))
    write(t, "alibi_no_heads", P(alibi=pb.Alibi(query_length=2, key_length=2)))
    write(t, "no_method", P())


def block_forward():
    t = "block_forward"
    B = pb.BlockForwardRequest
    write(t, "two_tokens", B(hidden_states=tensor([2, 512])))
    write(t, "padded_batch_stats_bf16", B(
        hidden_states=tensor([2, 2, 512], pb.BFLOAT16), sequence_lengths=[2, 1],
        layer_start=1, num_layers=2, want_attention_stats=True, position_offset=4))
    write(t, "bidirectional_positions", B(
        model="demo", hidden_states=tensor([3, 512]), causal=False, positions=[4, 2, 0],
        output_dtype=pb.FLOAT16))
    write(t, "wrong_hidden_size", B(hidden_states=tensor([2, 8])))
    write(t, "layer_past_end", B(hidden_states=tensor([1, 512]), layer_start=9))
    write(t, "unknown_model", B(model="nope", hidden_states=tensor([1, 512])))


def safetensors_file(header, payload):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + payload


def safetensors():
    t = "safetensors"
    a = rng.standard_normal(6).astype("<f4").tobytes()
    b = (rng.standard_normal(4).astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
    write(t, "two_tensors", safetensors_file({
        "__metadata__": {"format": "pt"},
        "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]}}, a + b))
    write(t, "int64_and_empty", safetensors_file({
        "ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]},
        "e": {"dtype": "F16", "shape": [0, 3], "data_offsets": [16, 16]}}, bytes(16)))
    write(t, "offsets_past_end", safetensors_file({
        "w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)))
    write(t, "shape_mismatch", safetensors_file({
        "w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8)))
    write(t, "header_too_long", struct.pack("<Q", 1 << 40) + b"{}")
    write(t, "not_json", struct.pack("<Q", 5) + b"{nope")


def model_config():
    t = "model_config"
    models = os.path.join(os.path.dirname(ROOT), "..", "tests", "golden", "models")
    for name in ("tiny-llama", "tiny-gpt2", "tiny-neox", "tiny-qwen2", "tiny-gemma"):
        shutil.copyfile(os.path.join(models, name, "config.json"), os.path.join(ROOT, t, name))
    write(t, "yarn_scaling", json.dumps({
        "model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
        "head_dim": 32, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                          "original_max_position_embeddings": 64}}).encode())
    write(t, "heads_do_not_divide", json.dumps({
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 6, "intermediate_size": 96}).encode())
    write(t, "unknown_model_type", b'{"model_type": "bert", "hidden_size": 8}')
    write(t, "not_an_object", b"[1, 2, 3]")


def tensor_codec():
    t = "tensor_codec"
    write(t, "f32", tensor([2, 3]))
    write(t, "bf16_nan_inf", tensor([4], pb.BFLOAT16, [np.nan, np.inf, -1.5, 0]))
    write(t, "f16_subnormal", tensor([1, 2, 2], pb.FLOAT16, [6e-8, -65504, 1, np.nan]))
    bad = tensor([2, 2])
    bad.data += b"\0\0\0\0"
    write(t, "extra_bytes", bad)
    write(t, "overflowing_shape", pb.Tensor(shape=[1 << 40, 1 << 40], dtype=pb.FLOAT32))
    write(t, "zero_dim", pb.Tensor(shape=[2, 0], dtype=pb.FLOAT16))
    write(t, "no_dtype", pb.Tensor(shape=[1], data=b"\0\0\0\0"))


def batch_queues():
    # Byte programs: 3 option bytes, then ops (op % 8: 0-2 schedule on key
    # (op >> 3) % 4 with 1 + next % 20 rows, 3 advance the clock by next us, 4-5
    # take, 6 flush, 7 check NextClose).
    t = "batch_queues"
    write(t, "fill_and_take", bytes([7, 10, 8, 0, 3, 8, 4, 16, 5, 7, 3, 20, 4, 4, 7]))
    write(t, "queue_full", bytes([15, 0, 2, 0, 1, 0, 1, 0, 1, 7, 6, 6, 6]))
    write(t, "two_keys_by_age", bytes([3, 5, 31, 0, 1, 8, 1, 3, 3, 16, 2, 3, 9, 7, 4, 4, 3,
                                       4, 4, 7, 5]))
    write(t, "oversized_task", bytes([0, 63, 9, 1, 19, 2, 19, 4, 7, 6, 7]))


def model_infer():
    # Its own generator, so that adding it left the other targets' bytes as they were.
    t = "model_infer"
    gen = np.random.default_rng(11)
    R = oip.ModelInferRequest

    def raw(shape, datatype):
        values = gen.standard_normal(shape).astype("f4")
        if datatype == "BF16":
            return (values.view("<u4") >> 16).astype("<u2").tobytes()
        return values.astype({"FP32": "<f4", "FP16": "<f2"}[datatype]).tobytes()

    def tensor_input(name, shape, datatype="FP32", fp32=None, int64=None):
        contents = None
        if fp32 is not None:
            contents = oip.InferTensorContents(fp32_contents=fp32)
        if int64 is not None:
            contents = oip.InferTensorContents(int64_contents=int64)
        return R.InferInputTensor(name=name, datatype=datatype, shape=shape,
                                  contents=contents)

    def request(model, inputs=(), raws=(), params=None, outputs=()):
        return R(model_name=model, inputs=inputs, raw_input_contents=raws,
                 parameters={k: parameter(v) for k, v in (params or {}).items()},
                 outputs=[R.InferRequestedOutputTensor(name=n) for n in outputs])

    def typed(n):
        return [float(v) for v in gen.standard_normal(n).astype("f4")]

    write(t, "demo_raw_fp32", request(
        "demo", [tensor_input("hidden_states", [1, 512])], [raw([1, 512], "FP32")],
        {"layer_start": 1, "num_layers": 2, "want_attention_stats": True},
        ["hidden_states"]))
    write(t, "demo_bf16_positions_int64", request(
        "demo", [tensor_input("hidden_states", [2, 512], "BF16"),
                 tensor_input("positions", [2], "INT64")],
        [raw([2, 512], "BF16"), struct.pack("<2q", 7, 8)],
        {"output_dtype": "FP16", "causal": "false"}))
    write(t, "sequence_start", R(
        model_name="demo", inputs=[tensor_input("hidden_states", [1, 512], "BF16")],
        raw_input_contents=[raw([1, 512], "BF16")],
        parameters={"sequence_id": oip.InferParameter(uint64_param=42),
                    "sequence_start": oip.InferParameter(bool_param=True)}))
    write(t, "normalize_typed_kind_epsilon", request(
        "normalize", [tensor_input("input", [2, 4], fp32=typed(8)),
                      tensor_input("weight", [4], fp32=typed(4))],
        params={"kind": "RMS_NORM", "epsilon": 1e-5, "weight_offset": 1,
                "output_dtype": "BF16"}, outputs=["output"]))
    write(t, "activate_swiglu_typed", request(
        "activate", [tensor_input("input", [2, 3], fp32=typed(6)),
                     tensor_input("gate", [2, 3], fp32=typed(6))],
        params={"activation": 8}))
    write(t, "rope_scaling_llama3", request(
        "positional_encode",
        [tensor_input("rope.query", [1, 2, 3, 8]),
         tensor_input("rope.key", [1, 1, 3, 8], "BF16"),
         tensor_input("rope.positions", [3], "INT64")],
        [raw([1, 2, 3, 8], "FP32"), raw([1, 1, 3, 8], "BF16"), struct.pack("<3q", 0, 2, 4)],
        {"rope.theta": "500000", "rope.scaling.type": "LLAMA3", "rope.scaling.factor": 8,
         "rope.scaling.original_max_position_embeddings": 8.0}, ["output", "key"]))
    write(t, "sinusoidal_list_params", request(
        "positional_encode", params={"sinusoidal.num_positions": 3, "sinusoidal.dim": "8",
                                     "sinusoidal.positions": "[4, 5, 6]",
                                     "sinusoidal.layout": 2}))
    write(t, "t5_bias_typed_table", request(
        "positional_encode", [tensor_input("t5_bias.table", [4, 2], fp32=typed(8))],
        params={"t5_bias.num_buckets": 4, "t5_bias.max_distance": 8,
                "t5_bias.query_length": 2, "t5_bias.key_length": 3}))
    # Wrong in one way each.
    write(t, "raw_count_mismatch", request(
        "normalize", [tensor_input("input", [1, 4]), tensor_input("weight", [4])],
        [raw([1, 4], "FP32")], {"kind": "LAYER_NORM"}))
    write(t, "raw_bytes_short", request(
        "normalize", [tensor_input("input", [2, 4])], [raw([7], "FP32")],
        {"kind": "LAYER_NORM"}))
    write(t, "typed_bf16", request(
        "activate", [tensor_input("input", [2], "BF16", fp32=typed(2))],
        params={"activation": "RELU"}))
    write(t, "oneof_conflict", request(
        "positional_encode", [tensor_input("rope.query", [1, 1, 1, 2], fp32=typed(2))],
        params={"alibi.num_heads": 2}))
    write(t, "epsilon_bool_unknown_output", request(
        "normalize", [tensor_input("input", [1, 4], fp32=typed(4))],
        params={"kind": "RMS_NORM", "epsilon": True}, outputs=["nope"]))
    write(t, "unknown_parameter", request(
        "normalize", [tensor_input("input", [1, 2], fp32=[1.0, 2.0])],
        params={"kind": "LAYER_NORM", "temperature": 0.5}))
    write(t, "sequence_end_without_id", R(
        model_name="demo", parameters={"sequence_end": oip.InferParameter(bool_param=True),
                                       "sequence_id": oip.InferParameter(string_param="")}))


def main():
    for target, make in [("normalize", normalize), ("activate", activate),
                         ("positional_encode", positional_encode),
                         ("block_forward", block_forward), ("safetensors", safetensors),
                         ("model_config", model_config), ("tensor_codec", tensor_codec),
                         ("batch_queues", batch_queues), ("model_infer", model_infer)]:
        folder = os.path.join(ROOT, target)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        make()


if __name__ == "__main__":
    main()
