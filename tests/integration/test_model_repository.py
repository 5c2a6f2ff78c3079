"""The model repository against broken checkpoints, through the real server: a
repository holding one good tiny model and many corrupt ones must start, list every
corrupt model as FAILED with an error naming the file and the tensor at fault, serve
the good one, and answer FAILED_PRECONDITION (with the load error) for the others;
its health service says, per model, which ones serve."""
import json
import os
import re
import shutil

import grpc
import numpy as np
import pytest

from grpc_std import health_pb2, health_pb2_grpc
from layerserve.v1 import layerserve_pb2 as pb
from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
from server_process import SOURCE_DIR, ServerProcess

GOLDEN_DIR = os.path.join(SOURCE_DIR, "tests", "golden")
GOOD = "tiny-mistral"  # Single F32 file, names without a prefix ("layers.0...."), D 40.
GOOD_NAME = "good-mistral"
WINDOWED = "windowed-mistral"  # The good model with sliding_window 4.


def read_safetensors(path):
    """(header dict in file order, data bytes)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_safetensors(path, header, data):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        f.write(data)


def copy_good(repo, name):
    target = repo / name
    shutil.copytree(os.path.join(GOLDEN_DIR, "models", GOOD), target)
    return target


def edit_header(repo, name, edit):
    """A copy of the good model whose safetensors header `edit(header, data)` changed."""
    path = copy_good(repo, name) / "model.safetensors"
    header, data = read_safetensors(path)
    data = edit(header, data) or data
    write_safetensors(path, header, data)


def edit_config(repo, name, edit):
    path = copy_good(repo, name) / "config.json"
    with open(path) as f:
        config = json.load(f)
    edit(config)
    with open(path, "w") as f:
        json.dump(config, f)


def truncate(header, data):
    del header
    return data[: len(data) // 2]


def offsets_past_data(header, data):
    entry = header["layers.1.mlp.down_proj.weight"]
    size = entry["data_offsets"][1] - entry["data_offsets"][0]
    entry["data_offsets"] = [len(data) - size + 64, len(data) + 64]


def offsets_overlap(header, data):
    del data
    # Both [40] F32: post_attention_layernorm now starts 4 bytes into input_layernorm.
    begin = header["layers.0.input_layernorm.weight"]["data_offsets"][0]
    header["layers.0.post_attention_layernorm.weight"]["data_offsets"] = [begin + 4,
                                                                          begin + 164]


def drop_tensor(header, data):
    del data
    del header["layers.1.mlp.down_proj.weight"]


def transpose_shape(header, data):
    del data
    header["layers.0.mlp.up_proj.weight"]["shape"].reverse()  # [64, 40] -> [40, 64]


def int32_weights(header, data):
    del data
    header["layers.0.self_attn.v_proj.weight"]["dtype"] = "I32"


def wider_hidden_size(config):
    config["hidden_size"] = 48


def bert(config):
    config["model_type"] = "bert"


# name -> (how to break it, regular expressions its error must match)
BROKEN = {
    "bad-truncated": (
        lambda repo, name: edit_header(repo, name, truncate),
        [r"bad-truncated/model\.safetensors: tensor \"[a-z_.0-9]+\": "
         r"data_offsets \[\d+, \d+\] outside the \d+-byte data section \(truncated file\?\)"]),
    "bad-offsets-past-data": (
        lambda repo, name: edit_header(repo, name, offsets_past_data),
        [r"bad-offsets-past-data/model\.safetensors: "
         r"tensor \"layers\.1\.mlp\.down_proj\.weight\": data_offsets \[\d+, \d+\] outside"]),
    "bad-offsets-overlap": (
        lambda repo, name: edit_header(repo, name, offsets_overlap),
        [r"bad-offsets-overlap/model\.safetensors: tensors "
         r"\"layers\.0\.input_layernorm\.weight\" and "
         r"\"layers\.0\.post_attention_layernorm\.weight\" overlap"]),
    "bad-missing-tensor": (
        lambda repo, name: edit_header(repo, name, drop_tensor),
        [r"bad-missing-tensor/model\.safetensors",
         r"missing tensor \"layers\.1\.mlp\.down_proj\.weight\""]),
    "bad-wrong-shape": (
        lambda repo, name: edit_header(repo, name, transpose_shape),
        [r"bad-wrong-shape/model\.safetensors: tensor \"layers\.0\.mlp\.up_proj\.weight\": "
         r"shape \[40,64\], config\.json implies \[64,40\]"]),
    "bad-int32-weights": (
        lambda repo, name: edit_header(repo, name, int32_weights),
        [r"bad-int32-weights/model\.safetensors: "
         r"tensor \"layers\.0\.self_attn\.v_proj\.weight\": dtype I32 is not F32, BF16 or F16"]),
    "bad-config-contradicts-weights": (
        lambda repo, name: edit_config(repo, name, wider_hidden_size),
        [r"bad-config-contradicts-weights/model\.safetensors: "
         r"tensor \"layers\.0\.input_layernorm\.weight\": shape \[40\], "
         r"config\.json implies \[48\]"]),
    "bad-unserved-model-type": (
        lambda repo, name: edit_config(repo, name, bert),
        [r"bad-unserved-model-type/config\.json: model_type: \"bert\" is not served"]),
}


def broken_config_json(repo, name):
    with open(copy_good(repo, name) / "config.json", "w") as f:
        f.write('{"model_type": "mistral", "hidden_size": 40,')


def missing_shard(repo, name):
    target = repo / name
    shutil.copytree(os.path.join(GOLDEN_DIR, "models", "tiny-llama"), target)
    os.remove(target / "model-00002-of-00002.safetensors")


def header_not_json(repo, name):
    path = copy_good(repo, name) / "model.safetensors"
    _, data = read_safetensors(path)
    text = b"{not json at all}" + b" " * 7
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)


BROKEN.update({
    "bad-config-json": (broken_config_json,
                        [r"bad-config-json/config\.json: not a JSON object"]),
    "bad-missing-shard": (missing_shard,
                          [r"bad-missing-shard/model-00002-of-00002\.safetensors: "
                           r"cannot open"]),
    "bad-header-not-json": (header_not_json,
                            [r"bad-header-not-json/model\.safetensors: "
                             r"header is not a JSON object"]),
})


def empty_weights(repo, name):
    (copy_good(repo, name) / "model.safetensors").write_bytes(b"")


def huge_header_length(repo, name):
    """A header length of 2**62: a loader that trusted it would try to allocate it."""
    path = copy_good(repo, name) / "model.safetensors"
    raw = path.read_bytes()
    path.write_bytes((1 << 62).to_bytes(8, "little") + raw[8:])


def weights_are_a_directory(repo, name):
    target = copy_good(repo, name)
    os.remove(target / "model.safetensors")
    (target / "model.safetensors").mkdir()


def shape_overflows(header, data):
    del data
    header["layers.0.mlp.up_proj.weight"]["shape"] = [1 << 40, 1 << 40]


# Corrupt in ways that could crash or exhaust a careless loader (faults).
BROKEN.update({
    "bad-empty-weights": (empty_weights,
                          [r"bad-empty-weights/model\.safetensors: "
                           r"truncated: 0 bytes, no header"]),
    "bad-huge-header-length": (huge_header_length,
                               [r"bad-huge-header-length/model\.safetensors: "
                                r"header length 4611686018427387904 does not fit the "
                                r"\d+-byte file"]),
    "bad-weights-directory": (weights_are_a_directory,
                              [r"bad-weights-directory/model\.safetensors: cannot map"]),
    "bad-shape-overflow": (
        lambda repo, name: edit_header(repo, name, shape_overflows),
        [r"bad-shape-overflow/model\.safetensors: "
         r"tensor \"layers\.0\.mlp\.up_proj\.weight\": shape overflows"]),
})


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repository")
    copy_good(repo, GOOD_NAME)
    edit_config(repo, WINDOWED, lambda config: config.update(sliding_window=4))
    for name, (breaker, _) in BROKEN.items():
        breaker(repo, name)
    # A directory without config.json is not a model and is not listed.
    (repo / "notes").mkdir()
    (repo / "notes" / "README").write_text("not a model\n")
    return repo


@pytest.fixture(scope="module")
def server(repository):
    process = ServerProcess(f"--model-repository={repository}")
    yield process
    code = process.stop()
    assert code == 0, process.output()


@pytest.fixture(scope="module")
def stub(server):
    with grpc.insecure_channel(server.target) as channel:
        yield pb_grpc.LayerServiceStub(channel)


def test_health_answers_per_model(server):
    serving, not_serving = (health_pb2.HealthCheckResponse.SERVING,
                            health_pb2.HealthCheckResponse.NOT_SERVING)
    with grpc.insecure_channel(server.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)

        def status(service):
            return health.Check(health_pb2.HealthCheckRequest(service=service),
                                timeout=10).status
        assert status("layerserve.v1.LayerService") == serving
        assert status(f"layerserve.v1.LayerService/{GOOD_NAME}") == serving
        assert status(f"layerserve.v1.LayerService/{WINDOWED}") == serving
        for name in BROKEN:
            assert status(f"layerserve.v1.LayerService/{name}") == not_serving, name
        with pytest.raises(grpc.RpcError) as error:
            status("layerserve.v1.LayerService/no-such-model")
        assert error.value.code() == grpc.StatusCode.NOT_FOUND


def test_lists_every_model_with_its_state(stub):
    models = {m.name: m for m in stub.ListModels(pb.ListModelsRequest(), timeout=10).models}
    assert set(models) == {GOOD_NAME, WINDOWED, *BROKEN}
    assert models[WINDOWED].state == pb.ModelInfo.READY
    good = models[GOOD_NAME]
    assert good.state == pb.ModelInfo.READY and good.error == ""
    assert good.is_default
    for name, (_, patterns) in BROKEN.items():
        info = models[name]
        assert info.state == pb.ModelInfo.FAILED, name
        assert not info.is_default, name
        for pattern in patterns:
            assert re.search(pattern, info.error), f"{name}: {info.error!r} !~ {pattern}"


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_failed_model_answers_failed_precondition(stub, name):
    info = stub.GetModel(pb.GetModelRequest(name=name), timeout=10)
    assert info.state == pb.ModelInfo.FAILED
    x = np.zeros((1, 3, 40), dtype="<f4")
    with pytest.raises(grpc.RpcError) as error:
        stub.BlockForward(pb.BlockForwardRequest(
            model=name, hidden_states=pb.Tensor(shape=[1, 3, 40], dtype=pb.FLOAT32,
                                                data=x.tobytes())), timeout=30)
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.value.details() == f'model: "{name}" failed to load: {info.error}'


def test_good_model_serves_the_golden_numbers(stub):
    with open(os.path.join(GOLDEN_DIR, "block_golden.json")) as f:
        golden = json.load(f)
    tolerance = golden["tolerance"]["float32_weights"]
    cases = [c for c in golden["cases"] if c["model"] == GOOD]
    assert cases
    for case in cases:
        for model in (GOOD_NAME, ""):  # By name and as the default.
            request = pb.BlockForwardRequest(
                model=model, layer_start=case["layer_start"], num_layers=case["num_layers"],
                hidden_states=pb.Tensor(
                    shape=case["shape"], dtype=pb.FLOAT32,
                    data=np.asarray(case["hidden_states"], dtype="<f4").tobytes()),
                position_offset=case["position_offset"], positions=case["positions"],
                sequence_lengths=case["sequence_lengths"])
            reply = stub.BlockForward(request, timeout=60)
            got = np.frombuffer(reply.hidden_states.data, dtype="<f4").astype(np.float64)
            want = np.asarray(case["expected"], dtype=np.float64)
            assert np.all(np.abs(got - want) <= tolerance * np.maximum(1, np.abs(want))), \
                case["name"]


def test_sliding_window_model_refuses_positions_it_would_get_wrong(stub):
    """The blocks do not implement a sliding window, so positions that reach it are
    refused (INVALID_ARGUMENT) instead of computed without the window."""
    x = np.zeros((1, 3, 40), dtype="<f4")
    tensor = pb.Tensor(shape=[1, 3, 40], dtype=pb.FLOAT32, data=x.tobytes())
    inside = stub.BlockForward(pb.BlockForwardRequest(
        model=WINDOWED, hidden_states=tensor, position_offset=1), timeout=30)
    assert list(inside.hidden_states.shape) == [1, 3, 40]
    with pytest.raises(grpc.RpcError) as error:
        stub.BlockForward(pb.BlockForwardRequest(
            model=WINDOWED, hidden_states=tensor, position_offset=2), timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details().startswith(
        'position_offset: position 4 reaches model "windowed-mistral"\'s sliding_window 4')


def test_repository_with_only_corrupt_models_starts_and_serves_the_rest(tmp_path):
    """No model loads: the server still starts, lists every model FAILED, answers
    BlockForward without a model NOT_FOUND, and serves the model-free RPCs."""
    for name in ["bad-truncated", "bad-huge-header-length", "bad-config-json"]:
        BROKEN[name][0](tmp_path, name)
    process = ServerProcess(f"--model-repository={tmp_path}")
    try:
        for name in ["bad-truncated", "bad-huge-header-length", "bad-config-json"]:
            assert f"layerserve: model {name} FAILED: " in process.output()
        with grpc.insecure_channel(process.target) as channel:
            stub = pb_grpc.LayerServiceStub(channel)
            models = stub.ListModels(pb.ListModelsRequest(), timeout=10).models
            assert {m.name: m.state for m in models} == {
                "bad-truncated": pb.ModelInfo.FAILED,
                "bad-huge-header-length": pb.ModelInfo.FAILED,
                "bad-config-json": pb.ModelInfo.FAILED}
            assert not any(m.is_default for m in models)
            x = np.zeros((1, 3, 40), dtype="<f4")
            with pytest.raises(grpc.RpcError) as error:
                stub.BlockForward(pb.BlockForwardRequest(hidden_states=pb.Tensor(
                    shape=[1, 3, 40], dtype=pb.FLOAT32, data=x.tobytes())), timeout=30)
            assert (error.value.code(), error.value.details()) == (
                grpc.StatusCode.NOT_FOUND, "model: no model is ready to serve (see ListModels)")
            y = np.array([[3, 4]], dtype="<f4")
            reply = stub.Normalize(pb.NormalizeRequest(
                kind=pb.RMS_NORM, epsilon=0,
                input=pb.Tensor(shape=[1, 2], dtype=pb.FLOAT32, data=y.tobytes())), timeout=10)
            # [3, 4] / sqrt(12.5)
            np.testing.assert_allclose(np.frombuffer(reply.output.data, "<f4"),
                                       [0.848528, 1.131371], rtol=1e-5)
    finally:
        assert process.stop() == 0, process.output()
