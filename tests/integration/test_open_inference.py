"""The Open Inference Protocol (inference.GRPCInferenceService) through the real
server: health and metadata RPCs, the RPCs it does not serve, ModelInfer answering
byte for byte what the layerserve.v1 call with the same bytes answers (every model
kind, FP32/BF16/FP16, raw and typed contents), sequences equal to v1 sessions,
ModelStreamInfer equal to unary calls, every request error with its code and the
name it starts with, bearer tokens, readiness and streams while draining, and OIP
and v1 calls sharing one batch."""
import json
import os
import queue
import shutil
import signal
import subprocess
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
from google.protobuf import json_format

from inference import grpc_service_pb2 as inference_pb
from inference import grpc_service_pb2_grpc as oip_grpc
from inference import model_config_pb2 as model_config
from layerserve.v1 import layerserve_pb2 as pb
from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
from oip import answers, infer_request, v1_answers, v1_tensor
from server_process import SERVER, SOURCE_DIR, ServerProcess, wait_for

MODELS = os.path.join(SOURCE_DIR, "tests", "golden", "models")
DEMO_HIDDEN = 512
# A small normalize request, for the tests about something else.
X24 = np.ones((2, 4))
RMS = {"kind": "RMS_NORM"}


def connect(*args):
    """A server with `args`, a channel to it and both services' stubs."""
    server = ServerProcess(*args)
    channel = grpc.insecure_channel(server.target)
    return SimpleNamespace(server=server, channel=channel,
                           oip=oip_grpc.GRPCInferenceServiceStub(channel),
                           v1=pb_grpc.LayerServiceStub(channel))


def disconnect(connected):
    """Closes the channel first (an open one holds the server's shutdown for
    seconds); the server must then exit 0."""
    connected.channel.close()
    assert connected.server.stop() == 0, connected.server.output()


@pytest.fixture(scope="module")
def demo():
    """The built-in models. One compute thread, so that the batching test can hold
    it with one long call while two others queue behind it."""
    connected = connect("--compute-threads=1")
    yield connected
    disconnect(connected)


# Over every request the golden tests send (at most 480 values: 2 x 5 tokens of 48),
# so that the element limit's test needs no server of its own.
ELEMENT_LIMIT = 1000


@pytest.fixture(scope="module")
def golden():
    """The golden repository's tiny checkpoints, with a small element limit."""
    connected = connect(f"--model-repository={MODELS}",
                        f"--max-request-elements={ELEMENT_LIMIT}")
    yield connected
    disconnect(connected)


def refusal(call, request, **kwargs):
    """The (code, details) a call was refused with."""
    with pytest.raises(grpc.RpcError) as error:
        call(request, timeout=30, **kwargs)
    return error.value.code(), error.value.details()


# ---------------------------------------------------------------------------
# Health, metadata and configuration
# ---------------------------------------------------------------------------

def test_server_live_and_ready(demo):
    assert demo.oip.ServerLive(inference_pb.ServerLiveRequest(), timeout=10).live
    assert demo.oip.ServerReady(inference_pb.ServerReadyRequest(), timeout=10).ready


@pytest.mark.parametrize("name, version, ready", [
    pytest.param("demo", "", True, id="demo"),
    pytest.param("demo", "1", True, id="demo-v1"),
    pytest.param("normalize", "", True, id="normalize"),
    pytest.param("positional_encode", "1", True, id="positional_encode-v1"),
    pytest.param("no-such-model", "", False, id="unknown"),
    pytest.param("demo", "2", False, id="demo-v2"),
    pytest.param("normalize", "7", False, id="normalize-v7")])
def test_model_ready(demo, name, version, ready):
    # Not ready is an answer, not an error.
    reply = demo.oip.ModelReady(
        inference_pb.ModelReadyRequest(name=name, version=version), timeout=10)
    assert reply.ready is ready


def test_server_metadata_names_the_binary_version_and_extensions(demo):
    printed = subprocess.run([SERVER, "--version"], capture_output=True, text=True,
                             timeout=30, check=True).stdout.split()
    assert printed[0] == "layerserve" and len(printed) == 2, printed  # "layerserve VERSION"
    reply = demo.oip.ServerMetadata(inference_pb.ServerMetadataRequest(), timeout=10)
    assert reply.name == "layerserve"
    assert reply.version == printed[1]
    assert list(reply.extensions) == ["model_configuration", "sequence", "parameters"]


def tensors(metadata):
    return [(t.name, t.datatype, list(t.shape)) for t in metadata]


def test_model_metadata(demo):
    reply = demo.oip.ModelMetadata(inference_pb.ModelMetadataRequest(name="demo"),
                                   timeout=10)
    assert (reply.name, list(reply.versions), reply.platform) == ("demo", ["1"],
                                                                  "layerserve")
    assert tensors(reply.inputs) == [
        ("hidden_states", "FP32", [-1, -1, DEMO_HIDDEN]),
        ("positions", "INT64", [-1]), ("sequence_lengths", "INT64", [-1])]
    assert tensors(reply.outputs) == [("hidden_states", "FP32", [-1, -1, DEMO_HIDDEN])]

    reply = demo.oip.ModelMetadata(inference_pb.ModelMetadataRequest(name="normalize"),
                                   timeout=10)
    assert (reply.name, list(reply.versions)) == ("normalize", ["1"])
    assert tensors(reply.inputs) == [(n, "FP32", [-1])
                                     for n in ["input", "weight", "bias", "residual"]]
    assert tensors(reply.outputs) == [("output", "FP32", [-1]),
                                      ("residual_out", "FP32", [-1])]

    assert refusal(demo.oip.ModelMetadata,
                   inference_pb.ModelMetadataRequest(name="nope")) == (
        grpc.StatusCode.NOT_FOUND,
        'name: no model "nope"; this server serves normalize, activate, '
        "positional_encode and its repository's demo")
    code, details = refusal(demo.oip.ModelMetadata,
                            inference_pb.ModelMetadataRequest(name="demo", version="3"))
    assert code == grpc.StatusCode.NOT_FOUND
    assert details == 'version: model "demo" serves version 1, not "3"'


def config_inputs(config):
    return [(i.name, i.data_type, list(i.dims), i.optional) for i in config.input]


def test_model_config(demo):
    config = demo.oip.ModelConfig(inference_pb.ModelConfigRequest(name="demo"),
                                  timeout=10).config
    assert (config.name, config.platform, config.backend) == ("demo", "layerserve",
                                                              "layerserve")
    assert config.max_batch_size == 0
    fp32, int64 = model_config.TYPE_FP32, model_config.TYPE_INT64
    assert config_inputs(config) == [
        ("hidden_states", fp32, [-1, -1, DEMO_HIDDEN], False),
        ("positions", int64, [-1], True), ("sequence_lengths", int64, [-1], True)]
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [
        ("hidden_states", fp32, [-1, -1, DEMO_HIDDEN])]
    assert config.WhichOneof("scheduling_choice") == "sequence_batching"
    # The sessions' TTL, --session-ttl's default of 5 minutes.
    assert config.sequence_batching.max_sequence_idle_microseconds == 300_000_000
    assert [(g.kind, g.count) for g in config.instance_group] == [
        (model_config.ModelInstanceGroup.KIND_CPU, 1)]  # --compute-threads=1
    parameters = {k: v.string_value for k, v in config.parameters.items()}
    assert parameters["architecture"] == "llama"
    assert parameters["hidden_size"] == str(DEMO_HIDDEN)
    assert parameters["num_layers"] == "4"

    config = demo.oip.ModelConfig(inference_pb.ModelConfigRequest(name="normalize"),
                                  timeout=10).config
    assert (config.name, config.platform, config.max_batch_size) == ("normalize",
                                                                     "layerserve", 0)
    assert config_inputs(config) == [("input", fp32, [-1], False),
                                     ("weight", fp32, [-1], True),
                                     ("bias", fp32, [-1], True),
                                     ("residual", fp32, [-1], True)]
    assert config.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert config.dynamic_batching.max_queue_delay_microseconds == 0  # The default.
    assert not config.parameters


UNSERVED = ["ModelStatistics", "RepositoryIndex", "RepositoryModelLoad",
            "RepositoryModelUnload", "SystemSharedMemoryStatus",
            "SystemSharedMemoryRegister", "SystemSharedMemoryUnregister",
            "CudaSharedMemoryStatus", "CudaSharedMemoryRegister",
            "CudaSharedMemoryUnregister", "TraceSetting", "LogSettings"]


@pytest.mark.parametrize("rpc", UNSERVED)
def test_unserved_rpc_answers_unimplemented_naming_itself(demo, rpc):
    request = getattr(inference_pb, f"{rpc}Request")()
    assert refusal(getattr(demo.oip, rpc), request) == (
        grpc.StatusCode.UNIMPLEMENTED,
        f"inference.GRPCInferenceService/{rpc} is not served by layerserve; it serves "
        "ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, "
        "ModelConfig, ModelInfer, ModelStreamInfer")


# ---------------------------------------------------------------------------
# ModelInfer equals the v1 call
# ---------------------------------------------------------------------------

# How the inputs travel: the datatype, and typed contents (fp32_contents) or raw.
ENCODINGS = {"FP32": ("FP32", False), "FP32-typed": ("FP32", True),
             "BF16": ("BF16", False), "FP16": ("FP16", False)}


def assert_same_answer(connected, model, inputs, params, typed, method, v1_request,
                       outputs):
    """ModelInfer(model, inputs, params) answers `outputs` with exactly the bytes,
    datatypes and shapes of v1 `method`(v1_request)."""
    got = connected.oip.ModelInfer(infer_request(model, inputs, params, typed=typed),
                                   timeout=60)
    want = getattr(connected.v1, method)(v1_request, timeout=60)
    assert got.model_name == model
    assert list(answers(got)) == outputs
    assert answers(got) == v1_answers(want, outputs)
    return got, want


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("model", ["tiny-llama", "tiny-gpt2"])
def test_block_forward_of_a_checkpoint_equals_v1(golden, model, encoding):
    datatype, typed = ENCODINGS[encoding]
    hidden = 40 if model == "tiny-gpt2" else 48
    x = np.random.default_rng(11).standard_normal((2, 4, hidden))
    got, _ = assert_same_answer(
        golden, model, [("hidden_states", x, datatype)],
        {"layer_start": 1, "num_layers": 1, "position_offset": 2}, typed, "BlockForward",
        pb.BlockForwardRequest(model=model, layer_start=1, num_layers=1,
                               position_offset=2, hidden_states=v1_tensor(x, datatype)),
        ["hidden_states"])
    assert got.model_version == "1"
    assert not got.parameters  # No sequence, no statistics asked for.


@pytest.mark.parametrize("typed", [False, True], ids=["raw", "typed"])
def test_block_forward_with_int64_sequence_lengths_and_stats_equals_v1(golden, typed):
    x = np.random.default_rng(12).standard_normal((2, 5, 48))
    got, want = assert_same_answer(
        golden, "tiny-llama",
        [("hidden_states", x, "FP32"), ("sequence_lengths", np.array([5, 2]), "INT64")],
        {"num_layers": 2, "want_attention_stats": True}, typed, "BlockForward",
        pb.BlockForwardRequest(model="tiny-llama", num_layers=2, sequence_lengths=[5, 2],
                               want_attention_stats=True,
                               hidden_states=v1_tensor(x, "FP32")),
        ["hidden_states"])
    # The response's other fields as parameters: attention_stats as a JSON list.
    stats = json.loads(got.parameters["attention_stats"].string_param)
    assert [json_format.ParseDict(s, pb.AttentionStats()) for s in stats] == \
        list(want.attention_stats)
    assert len(stats) == 2


def operation_case(name, datatype):
    """(model, inputs, parameters, v1 method, v1 request, outputs) of one case."""
    rng = np.random.default_rng(len(name))
    t = lambda a: v1_tensor(a, datatype)  # noqa: E731
    if name == "rms-norm-weight-residual":
        x, w, r = rng.standard_normal((3, 16)), rng.standard_normal(16), \
            rng.standard_normal((3, 16))
        return ("normalize", [("input", x, datatype), ("weight", w, datatype),
                              ("residual", r, datatype)],
                {"kind": "RMS_NORM", "epsilon": 1e-5}, "Normalize",
                pb.NormalizeRequest(kind=pb.RMS_NORM, input=t(x), weight=t(w),
                                    residual=t(r), epsilon=1e-5),
                ["output", "residual_out"])
    if name == "layer-norm-bias":
        x, w, b = rng.standard_normal((2, 3, 12)), rng.standard_normal(12), \
            rng.standard_normal(12)
        return ("normalize", [("input", x, datatype), ("weight", w, datatype),
                              ("bias", b, datatype)],
                # A number may come as a string.
                {"kind": "LAYER_NORM", "epsilon": "1e-3"}, "Normalize",
                pb.NormalizeRequest(kind=pb.LAYER_NORM, input=t(x), weight=t(w),
                                    bias=t(b), epsilon=1e-3),
                ["output"])
    if name == "swiglu-gate":
        up, gate = rng.standard_normal((3, 10)), rng.standard_normal((3, 10))
        return ("activate", [("input", up, datatype), ("gate", gate, datatype)],
                {"activation": "SWIGLU"}, "Activate",
                pb.ActivateRequest(activation=pb.SWIGLU, input=t(up), gate=t(gate)),
                ["output"])
    if name == "gelu":
        x = rng.standard_normal((2, 3, 7)) * 3
        # An enum also by its number.
        return ("activate", [("input", x, datatype)], {"activation": pb.GELU},
                "Activate", pb.ActivateRequest(activation=pb.GELU, input=t(x)),
                ["output"])
    if name == "rope-yarn":
        q, k = rng.standard_normal((1, 4, 5, 8)), rng.standard_normal((1, 2, 5, 8))
        return ("positional_encode",
                [("rope.query", q, datatype), ("rope.key", k, datatype)],
                {"rope.theta": 500000.0, "rope.scaling.type": "YARN",
                 "rope.scaling.factor": 4,  # int64 for a float field
                 "rope.scaling.original_max_position_embeddings": "64",
                 "rope.position_offset": 3}, "PositionalEncode",
                pb.PositionalEncodeRequest(rope=pb.Rope(
                    query=t(q), key=t(k), theta=500000.0, position_offset=3,
                    scaling=pb.RopeScaling(type=pb.RopeScaling.YARN, factor=4,
                                           original_max_position_embeddings=64))),
                ["output", "key"])
    assert name == "rope-llama3"
    q = rng.standard_normal((1, 5, 4, 8))
    return ("positional_encode", [("rope.query", q, datatype)],
            {"rope.layout": "BTHD", "rope.scaling.type": "LLAMA3",
             "rope.scaling.factor": 8.0,
             "rope.scaling.original_max_position_embeddings": 16,
             "rope.positions": "[0, 2, 4, 6, 8]"}, "PositionalEncode",
            pb.PositionalEncodeRequest(rope=pb.Rope(
                query=t(q), layout=pb.Rope.BTHD, positions=[0, 2, 4, 6, 8],
                scaling=pb.RopeScaling(type=pb.RopeScaling.LLAMA3, factor=8.0,
                                       original_max_position_embeddings=16))),
            ["output"])


OPERATIONS = ["rms-norm-weight-residual", "layer-norm-bias", "swiglu-gate", "gelu",
              "rope-yarn", "rope-llama3"]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("case", OPERATIONS)
def test_builtin_operation_equals_v1(demo, case, encoding):
    datatype, typed = ENCODINGS[encoding]
    model, inputs, params, method, v1_request, outputs = operation_case(case, datatype)
    got, _ = assert_same_answer(demo, model, inputs, params, typed, method, v1_request,
                                outputs)
    assert all(out.datatype == datatype for out in got.outputs)


def test_alibi_from_parameters_alone_equals_v1(demo):
    got, _ = assert_same_answer(
        demo, "positional_encode", [],
        {"alibi.num_heads": 4, "alibi.query_length": 3, "alibi.key_length": 5}, False,
        "PositionalEncode",
        pb.PositionalEncodeRequest(alibi=pb.Alibi(num_heads=4, query_length=3,
                                                  key_length=5)),
        ["output"])
    assert answers(got)["output"][:2] == ("FP32", [4, 3, 5])


def test_output_dtype_parameter_converts_the_answer(demo):
    x = np.random.default_rng(3).standard_normal((4, 8))
    got, _ = assert_same_answer(
        demo, "normalize", [("input", x, "FP32")],
        {"kind": "RMS_NORM", "output_dtype": "BF16"}, False, "Normalize",
        pb.NormalizeRequest(kind=pb.RMS_NORM, input=v1_tensor(x, "FP32"),
                            output_dtype=pb.BFLOAT16),
        ["output"])
    assert answers(got)["output"][0] == "BF16"


def test_requested_outputs_are_the_only_ones_answered(demo):
    x = np.ones((2, 4))
    got = demo.oip.ModelInfer(infer_request(
        "normalize", [("input", x, "FP32"), ("residual", x, "FP32")], RMS,
        outputs=["residual_out"], id="only-residual"), timeout=30)
    assert got.id == "only-residual"
    assert list(answers(got)) == ["residual_out"]
    assert np.frombuffer(answers(got)["residual_out"][2], "<f4").tolist() == [2.0] * 8


# ---------------------------------------------------------------------------
# Sequences
# ---------------------------------------------------------------------------

SEQUENCE_MODEL, SEQUENCE_HIDDEN = "tiny-llama", 48


def step(connected, x, sequence_id, **flags):
    """One ModelInfer of a sequence on SEQUENCE_MODEL's layers 1-2."""
    params = {"sequence_id": sequence_id, **flags}
    if flags.get("sequence_start"):
        params.update(layer_start=1, num_layers=2)  # The start says which layers.
    return connected.oip.ModelInfer(infer_request(
        SEQUENCE_MODEL, [("hidden_states", x[None], "FP32")], params), timeout=60)


def test_sequence_equals_a_v1_session_step_by_step(golden):
    x = np.random.default_rng(21).standard_normal((8, SEQUENCE_HIDDEN)).astype(np.float32)
    session = golden.v1.OpenSession(pb.OpenSessionRequest(
        model=SEQUENCE_MODEL, layer_start=1, num_layers=2), timeout=30)
    chunks = [(0, 4), (4, 5), (5, 6), (6, 8)]  # A prefill, then steps.
    for i, (begin, end) in enumerate(chunks):
        got = step(golden, x[begin:end], 42, sequence_start=i == 0,
                   sequence_end=i == len(chunks) - 1)
        want = golden.v1.BlockForward(pb.BlockForwardRequest(
            hidden_states=v1_tensor(x[None, begin:end], "FP32"),
            session_id=session.session_id), timeout=60)
        assert answers(got) == v1_answers(want, ["hidden_states"]), f"chunk {i}"
        assert got.parameters["session_length"].int64_param == want.session_length == end
    golden.v1.CloseSession(pb.CloseSessionRequest(session_id=session.session_id))

    # The end closed it.
    with pytest.raises(grpc.RpcError) as error:
        step(golden, x[:1], 42)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    assert error.value.details().startswith(
        'sequence_id: sequence "42" was closed; start it again (sequence_start)')


def test_session_ids_parameter_steps_many_v1_sessions_in_one_call(golden):
    """`session_ids` as a list parameter: the same bytes as the v1 multi-session
    call on twin sessions, each session's length in `session_lengths`."""
    x = np.random.default_rng(22).standard_normal((3, 2, SEQUENCE_HIDDEN))

    def sessions():
        return [golden.v1.OpenSession(pb.OpenSessionRequest(
            model=SEQUENCE_MODEL, layer_start=1, num_layers=2), timeout=30).session_id
            for _ in range(3)]
    oip_ids, v1_ids = sessions(), sessions()
    got, want = assert_same_answer(
        golden, SEQUENCE_MODEL, [("hidden_states", x, "FP32")],
        {"session_ids": ",".join(oip_ids), "sequence_lengths": "2,1,2"}, False,
        "BlockForward",
        pb.BlockForwardRequest(session_ids=v1_ids, sequence_lengths=[2, 1, 2],
                               hidden_states=v1_tensor(x, "FP32")),
        ["hidden_states"])
    assert list(want.session_lengths) == [2, 1, 2]
    assert json.loads(got.parameters["session_lengths"].string_param) == [2, 1, 2]
    code, details = refusal(golden.oip.ModelInfer, infer_request(
        SEQUENCE_MODEL, [("hidden_states", x, "FP32")],
        {"session_ids": ",".join(oip_ids), "sequence_id": 7, "sequence_start": True}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("session_ids, sequence_id: give a sequence or v1 sessions")


def test_sequence_never_started_is_not_found(golden):
    with pytest.raises(grpc.RpcError) as error:
        step(golden, np.ones((1, SEQUENCE_HIDDEN)), "never-started-7")
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    assert error.value.details().startswith(
        'sequence_id: sequence "never-started-7" is unknown on this replica')


def test_sequence_start_on_an_open_sequence_restarts_it(golden):
    x = np.random.default_rng(22).standard_normal((4, SEQUENCE_HIDDEN)).astype(np.float32)
    first = step(golden, x[:3], "chat-1", sequence_start=True)
    assert step(golden, x[3:], "chat-1").parameters["session_length"].int64_param == 4
    again = step(golden, x[:3], "chat-1", sequence_start=True)
    # An empty cache again: the same tokens, the same answer.
    assert again.parameters["session_length"].int64_param == 3
    assert answers(again) == answers(first)
    assert step(golden, x[3:], "chat-1", sequence_end=True) \
        .parameters["session_length"].int64_param == 4


# ---------------------------------------------------------------------------
# ModelStreamInfer
# ---------------------------------------------------------------------------

def test_stream_equals_unary_calls_in_order_and_survives_an_error(golden):
    rng = np.random.default_rng(31)
    a, b, c = (rng.standard_normal((1, n, SEQUENCE_HIDDEN)) for n in (5, 4, 3))
    # uint64 sequence ids, as Triton's clients send them.
    seq_a, seq_b = (inference_pb.InferParameter(uint64_param=n) for n in (101, 102))
    layers = {"layer_start": 0, "num_layers": 3}

    def request(i, inputs, **params):
        return infer_request(SEQUENCE_MODEL, inputs, params, id=f"r{i}")

    requests = [
        request(0, [("hidden_states", a[:, :3], "FP32")], sequence_id=seq_a,
                sequence_start=True, **layers),
        request(1, [("hidden_states", b[:, :2], "FP32")], sequence_id=seq_b,
                sequence_start=True, **layers),
        request(2, [("hidden_states", c, "FP32")], **layers),  # Stateless.
        request(3, [("hidden_states", a[:, 3:4], "FP32")], sequence_id=seq_a),
        request(4, [("nope", c, "FP32")]),  # An error, mid-stream.
        request(5, [("hidden_states", b[:, 2:3], "FP32")], sequence_id=seq_b),
        request(6, [("hidden_states", a[:, 4:5], "FP32")], sequence_id=seq_a,
                sequence_end=True),
        request(7, [("hidden_states", b[:, 3:4], "FP32")], sequence_id=seq_b,
                sequence_end=True),
        request(8, [("hidden_states", c[:, :1], "FP32")],  # Never started.
                sequence_id=inference_pb.InferParameter(uint64_param=103)),
    ]
    streamed = list(golden.oip.ModelStreamInfer(iter(requests), timeout=120))
    assert [r.infer_response.id for r in streamed] == [f"r{i}" for i in range(9)]
    assert all(r.infer_response.model_name == SEQUENCE_MODEL for r in streamed)
    assert [i for i, r in enumerate(streamed) if r.error_message] == [4, 8]
    assert streamed[4].error_message.startswith(
        'INVALID_ARGUMENT: inputs[0].name: no input "nope"; the inputs are hidden_states')
    assert streamed[8].error_message.startswith(
        'NOT_FOUND: sequence_id: sequence "103" is unknown on this replica')
    assert not streamed[4].infer_response.outputs

    # The same requests one at a time (the stream ended both sequences: they start
    # afresh). An error is the unary call's, "CODE: message".
    for i, (req, got) in enumerate(zip(requests, streamed)):
        if got.error_message:
            code, details = refusal(golden.oip.ModelInfer, req)
            assert got.error_message == f"{code.name}: {details}", f"r{i}"
            continue
        unary = golden.oip.ModelInfer(req, timeout=60)
        assert answers(got.infer_response) == answers(unary), f"r{i}"
        assert got.infer_response.parameters == unary.parameters, f"r{i}"
    lengths = [streamed[i].infer_response.parameters["session_length"].int64_param
               for i in (0, 1, 3, 5, 6, 7)]
    assert lengths == [3, 2, 4, 3, 5, 4]


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------

def bad(model, inputs=(), params=None, typed=False, outputs=(), edit=None, version=""):
    request = infer_request(model, inputs, params, typed=typed, outputs=outputs,
                            version=version)
    if edit is not None:
        edit(request)
    return request


INVALID, NOT_FOUND = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
ERRORS = {
    "raw-and-typed": (
        bad("normalize", [("input", X24, "FP32")], RMS, typed=True,
            edit=lambda r: r.raw_input_contents.append(b"\0" * 32)),
        INVALID, 'input: input "input" has typed contents, and raw_input_contents are '
                 "given too"),
    "raw-count": (
        bad("normalize", [("input", X24, "FP32"), ("weight", np.ones(4), "FP32")], RMS,
            edit=lambda r: r.raw_input_contents.pop()),
        INVALID, "raw_input_contents: 1 entries for 2 inputs"),
    "unknown-input": (
        bad("normalize", [("x", X24, "FP32")], RMS),
        INVALID, 'inputs[0].name: no input "x"; the inputs are input, weight, bias, '
                 "residual"),
    "unknown-parameter": (
        bad("normalize", [("input", X24, "FP32")], {"kind": "RMS_NORM", "x": 1}),
        INVALID, 'x: no parameter "x"; the parameters are '),
    "unknown-output": (
        bad("normalize", [("input", X24, "FP32")], RMS, outputs=["y"]),
        INVALID, 'outputs[0].name: no output "y"; the outputs are output, residual_out'),
    "bytes-not-matching-shape": (
        bad("normalize", [("input", X24, "FP32")], RMS,
            edit=lambda r: r.raw_input_contents.__setitem__(0, b"\0" * 28)),
        INVALID, 'input: input "input" [2,4] FP32 needs 32 bytes; raw_input_contents[0] '
                 "holds 28"),
    "typed-count": (
        bad("normalize", [("input", X24, "FP32")], RMS, typed=True,
            edit=lambda r: r.inputs[0].contents.fp32_contents.pop()),
        INVALID, 'input: input "input" [2,4] FP32 needs 8 values; '
                 "contents.fp32_contents holds 7"),
    "bf16-typed": (
        bad("normalize", [("input", X24, "FP32")], RMS, typed=True,
            edit=lambda r: setattr(r.inputs[0], "datatype", "BF16")),
        INVALID, 'input: input "input" [2,4] BF16: the protocol has no typed contents '
                 "for BF16; send it in raw_input_contents"),
    "bad-datatype": (
        bad("demo", [("hidden_states", np.ones((1, DEMO_HIDDEN)), "FP32")],
            edit=lambda r: setattr(r.inputs[0], "datatype", "INT8")),
        INVALID, 'hidden_states: input "hidden_states" has datatype "INT8"; it takes '
                 "FP32, BF16 or FP16"),
    "input-twice": (
        bad("normalize", [("input", X24, "FP32"), ("input", X24, "FP32")], RMS),
        INVALID, 'input: input "input" is given twice (inputs[1])'),
    "parameter-type": (
        bad("normalize", [("input", X24, "FP32")], {"kind": "RMS_NORM", "epsilon": True}),
        INVALID, 'epsilon: parameter "epsilon" must be a number, got bool true'),
    "oneof-conflict": (
        bad("positional_encode", [("rope.query", np.ones((1, 2, 3, 4)), "FP32")],
            {"alibi.num_heads": 4}),
        INVALID, 'alibi.num_heads: belongs to "alibi", but "rope" was chosen by '
                 "rope.query; give the inputs and parameters of one of sinusoidal, "
                 "learned, rope, alibi, t5_bias"),
    "v1-validation": (
        bad("demo", [("hidden_states", np.ones((2, 100)), "FP32")]),
        INVALID, 'hidden_states.shape: last dimension 100 of [2,100] must equal model '
                 '"demo"\'s hidden_size 512'),
    "empty-model-name": (bad(""), INVALID, "model_name: required"),
    "unknown-model": (bad("nope"), NOT_FOUND, 'model_name: no model "nope"; this server '
                                              "serves normalize, activate, "),
    "wrong-version": (
        bad("normalize", [("input", X24, "FP32")], RMS, version="2"),
        NOT_FOUND, 'model_version: model "normalize" serves version 1, not "2"'),
    "sequence-on-normalize": (
        bad("normalize", [("input", X24, "FP32")], {"kind": "RMS_NORM",
                                                    "sequence_id": 5}),
        INVALID, 'sequence_id: model "normalize" keeps no state'),
    "start-without-id": (
        bad("demo", [("hidden_states", np.ones((1, DEMO_HIDDEN)), "FP32")],
            {"sequence_start": True}),
        INVALID, 'sequence_start: parameter "sequence_start" is true but no sequence_id '
                 "says which sequence"),
}


@pytest.mark.parametrize("case", ERRORS)
def test_request_error(demo, case):
    request, code, message = ERRORS[case]
    got_code, details = refusal(demo.oip.ModelInfer, request)
    assert (got_code, details[:len(message)]) == (code, message), details


def test_valid_request_after_the_errors_succeeds(demo):
    got = demo.oip.ModelInfer(infer_request("normalize", [("input", X24, "FP32")], RMS),
                              timeout=30)
    assert answers(got)["output"][:2] == ("FP32", [2, 4])


def test_request_over_the_element_limit_is_resource_exhausted(golden):
    x = np.ones((7, 143))  # ELEMENT_LIMIT + 1 values.
    message = ("request too large: 1001 values, over the server's limit of 1000 "
               "(--max-request-elements); split it into smaller requests")
    assert refusal(golden.oip.ModelInfer,
                   infer_request("normalize", [("input", x, "FP32")], RMS)) == \
        (grpc.StatusCode.RESOURCE_EXHAUSTED, message)
    # As v1 answers it.
    assert refusal(golden.v1.Normalize, pb.NormalizeRequest(
        kind=pb.RMS_NORM, input=v1_tensor(x, "FP32"))) == \
        (grpc.StatusCode.RESOURCE_EXHAUSTED, message)
    got = golden.oip.ModelInfer(
        infer_request("normalize", [("input", np.ones((10, 100)), "FP32")], RMS),
        timeout=30)
    assert answers(got)["output"][1] == [10, 100]


# ---------------------------------------------------------------------------
# Bearer tokens
# ---------------------------------------------------------------------------

def test_token_server_exempts_health_rpcs_only(tmp_path):
    token = "oip-test-token-0123456789abcdef"
    (tmp_path / "tokens").write_text(token + "\n")
    connected = connect(f"--auth-token-file={tmp_path / 'tokens'}")
    bearer = [("authorization", f"Bearer {token}")]
    missing = ('missing credentials: this server requires "authorization: Bearer '
               '<token>" metadata')
    try:
        stub = connected.oip
        # Probes, as grpc.health.v1: no token needed.
        assert stub.ServerLive(inference_pb.ServerLiveRequest(), timeout=10).live
        assert stub.ServerReady(inference_pb.ServerReadyRequest(), timeout=10).ready
        assert stub.ModelReady(inference_pb.ModelReadyRequest(name="demo"),
                               timeout=10).ready

        metadata = inference_pb.ModelMetadataRequest(name="demo")
        assert refusal(stub.ModelMetadata, metadata) == \
            (grpc.StatusCode.UNAUTHENTICATED, missing)
        assert stub.ModelMetadata(metadata, metadata=bearer, timeout=10).name == "demo"

        infer = infer_request("normalize", [("input", X24, "FP32")], RMS)
        assert refusal(stub.ModelInfer, infer) == (grpc.StatusCode.UNAUTHENTICATED,
                                                   missing)
        assert refusal(stub.ModelInfer, infer,
                       metadata=[("authorization", "Bearer wrong")]) == \
            (grpc.StatusCode.UNAUTHENTICATED, "invalid bearer token")
        assert answers(stub.ModelInfer(infer, metadata=bearer, timeout=30))["output"]
        assert refusal(lambda r, **kw: list(stub.ModelStreamInfer(iter([r]), **kw)),
                       infer)[0] == grpc.StatusCode.UNAUTHENTICATED
        streamed = list(stub.ModelStreamInfer(iter([infer]), metadata=bearer, timeout=30))
        assert streamed[0].error_message == ""
    finally:
        disconnect(connected)


# ---------------------------------------------------------------------------
# Draining
# ---------------------------------------------------------------------------

class FedRequests:
    """A request iterator for a stream that the test feeds; None ends it."""

    def __init__(self):
        self.queue = queue.Queue()

    def __iter__(self):
        return self

    def __next__(self):
        item = self.queue.get()
        if item is None:
            raise StopIteration
        return item


def start_blocker(connected, oip_call):
    """Starts a call that keeps the only worker busy for a while (1024 tokens
    through the demo model's 4 layers: a fraction of a second, much more under a
    sanitizer) and returns its future once it computes. A worker taking a request
    counts its queue time, so that counter moving is the moment: no guessed sleep."""
    x = np.zeros((1, 1024, DEMO_HIDDEN), np.float32)
    method = "ModelInfer" if oip_call else "BlockForward"

    def taken():
        return connected.server.metric_sum("layerserve_queue_duration_seconds_count",
                                           method=method)

    before = taken()
    if oip_call:
        future = connected.oip.ModelInfer.future(infer_request(
            "demo", [("hidden_states", x, "FP32")], {"num_layers": 4}), timeout=300)
    else:
        future = connected.v1.BlockForward.future(pb.BlockForwardRequest(
            hidden_states=v1_tensor(x, "FP32"), num_layers=4), timeout=300)
    assert wait_for(lambda: taken() > before, timeout=60), "the blocker never computed"
    return future


def test_draining_server_is_not_ready_and_ends_streams_unavailable():
    connected = connect("--compute-threads=1", "--shutdown-grace=60s")
    server, stub = connected.server, connected.oip
    idle_requests, busy_requests = FedRequests(), FedRequests()
    try:
        idle = stub.ModelStreamInfer(idle_requests, timeout=120)
        idle_requests.queue.put(infer_request("normalize", [("input", X24, "FP32")], RMS,
                                              id="first"))
        assert next(idle).infer_response.id == "first"  # Open, and now idle.

        blocker = start_blocker(connected, oip_call=True)
        # A stream whose request waits behind the blocker when the drain begins.
        busy = stub.ModelStreamInfer(busy_requests, timeout=120)
        busy_requests.queue.put(infer_request("normalize", [("input", X24, "FP32")], RMS,
                                              id="accepted"))
        assert wait_for(lambda: server.metric_value("layerserve_queue_depth") == 1,
                        timeout=60)

        server.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "draining" in server.output(), timeout=60)
        assert not stub.ServerReady(inference_pb.ServerReadyRequest(), timeout=10).ready
        assert not stub.ModelReady(inference_pb.ModelReadyRequest(name="demo"),
                                   timeout=10).ready
        assert stub.ServerLive(inference_pb.ServerLiveRequest(), timeout=10).live
        assert not blocker.done(), "the blocker ended too soon: the test proves nothing"

        draining = (grpc.StatusCode.UNAVAILABLE,
                    "server is draining (shutting down); retry on another replica")
        with pytest.raises(grpc.RpcError) as error:
            next(idle)
        assert (error.value.code(), error.value.details()) == draining

        # The accepted calls still finish; then the busy stream ends as the idle one.
        got = answers(blocker.result())["hidden_states"]
        assert got[:2] == ("FP32", [1, 1024, DEMO_HIDDEN])
        answered = next(busy)
        assert (answered.error_message, answered.infer_response.id) == ("", "accepted")
        with pytest.raises(grpc.RpcError) as error:
            next(busy)
        assert (error.value.code(), error.value.details()) == draining
    finally:
        idle_requests.queue.put(None)
        busy_requests.queue.put(None)
        connected.channel.close()
    assert server.proc.wait(timeout=60) == 0, server.output()
    assert "stopped" in server.output()


# ---------------------------------------------------------------------------
# Batching with v1 calls, and metrics
# ---------------------------------------------------------------------------

def test_oip_and_v1_calls_for_the_same_layers_share_one_batch(demo):
    server = demo.server

    def batches():
        return {k: server.metric_sum(f"layerserve_batch_size_{k}", method="BlockForward",
                                     **({"le": "1"} if k == "bucket" else {}))
                for k in ("count", "sum", "bucket")}

    def ok_infers():
        return server.metric_sum("layerserve_requests_total", method="ModelInfer",
                                 model="demo", code="OK")

    before, oks = batches(), ok_infers()
    rng = np.random.default_rng(41)
    x, y = (rng.standard_normal((1, 6, DEMO_HIDDEN)).astype(np.float32) for _ in range(2))
    blocker = start_blocker(demo, oip_call=False)
    from_oip = demo.oip.ModelInfer.future(infer_request(
        "demo", [("hidden_states", x, "FP32")], {"layer_start": 1, "num_layers": 2}),
        timeout=300)
    from_v1 = demo.v1.BlockForward.future(pb.BlockForwardRequest(
        hidden_states=v1_tensor(y, "FP32"), layer_start=1, num_layers=2), timeout=300)
    assert wait_for(lambda: server.metric_value("layerserve_queue_depth") == 2,
                    timeout=60), server.metrics()
    assert not blocker.done(), "the blocker ended too soon: the test proves nothing"
    blocker.result()
    batched_oip, batched_v1 = from_oip.result(), from_v1.result()

    # The blocker alone, then the two together: one batch of 1 and one of 2.
    after = batches()
    assert {k: after[k] - before[k] for k in after} == {"count": 2, "sum": 3, "bucket": 1}
    assert wait_for(lambda: ok_infers() == oks + 1)

    # Batched, each answers what it answers alone.
    alone = demo.v1.BlockForward(pb.BlockForwardRequest(
        hidden_states=v1_tensor(x, "FP32"), layer_start=1, num_layers=2), timeout=60)
    assert answers(batched_oip) == v1_answers(alone, ["hidden_states"])
    assert batched_v1.hidden_states.data == demo.v1.BlockForward(pb.BlockForwardRequest(
        hidden_states=v1_tensor(y, "FP32"), layer_start=1, num_layers=2),
        timeout=60).hidden_states.data


def requests_total(server, method, code, **labels):
    return server.metric_sum("layerserve_requests_total", method=method, code=code,
                             **labels)


def test_metrics_count_oip_calls_and_pass_promtool(demo):
    server = demo.server
    oks = requests_total(server, "ModelInfer", "OK", model="demo")
    unimplemented = requests_total(server, "ModelStatistics", "UNIMPLEMENTED")
    demo.oip.ModelInfer(infer_request(
        "demo", [("hidden_states", np.ones((1, 2, DEMO_HIDDEN)), "FP32")]), timeout=30)
    refusal(demo.oip.ModelStatistics, inference_pb.ModelStatisticsRequest())
    assert wait_for(lambda: requests_total(server, "ModelInfer", "OK", model="demo")
                    == oks + 1)
    assert wait_for(lambda: requests_total(server, "ModelStatistics", "UNIMPLEMENTED")
                    == unimplemented + 1)

    text = server.metrics()
    assert ('layerserve_request_duration_seconds_count{method="ModelInfer",'
            'model="demo"}') in text
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is required"
    check = subprocess.run([promtool, "check", "metrics"], input=text,
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr


def test_builtin_model_calls_are_counted_under_their_model_name(demo):
    server = demo.server
    anywhere = requests_total(server, "ModelInfer", "OK")
    labelled = requests_total(server, "ModelInfer", "OK", model="normalize")
    demo.oip.ModelInfer(infer_request("normalize", [("input", X24, "FP32")], RMS),
                        timeout=30)
    # Counted somewhere first, so that the label's check needs no wait.
    assert wait_for(lambda: requests_total(server, "ModelInfer", "OK") == anywhere + 1)
    assert requests_total(server, "ModelInfer", "OK", model="normalize") == labelled + 1
