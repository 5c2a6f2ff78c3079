"""The standard error details through the real server: every INVALID_ARGUMENT
carries a google.rpc.BadRequest naming the request field, RESOURCE_EXHAUSTED from a
full queue a google.rpc.RetryInfo, and none when no retry can succeed (a request
over the limits); code and message unchanged.
Read from the grpc-status-details-bin trailer with the raw stubs, as any gRPC
client would (client/python/tests/test_errors.py: through LayerServeError)."""
import grpc
import numpy as np
import pytest

from google.rpc import error_details_pb2, status_pb2
from layerserve.v1 import layerserve_pb2 as pb
from server_process import started, stop
from test_serving import normalize_request, occupy_worker, wait_queued
from wire import array_tensor

DEMO_HIDDEN = 512


def details_of(error: grpc.RpcError) -> status_pb2.Status:
    """The google.rpc.Status of the error's trailer; it must be there."""
    trailer = dict(error.trailing_metadata() or ())
    assert "grpc-status-details-bin" in trailer, trailer
    status = status_pb2.Status()
    status.ParseFromString(trailer["grpc-status-details-bin"])
    assert status.code == error.code().value[0]
    assert status.message == error.details()
    return status


def field_violations(error: grpc.RpcError):
    status = details_of(error)
    assert len(status.details) == 1, status
    bad_request = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad_request), status.details[0].type_url
    return [(v.field, v.description) for v in bad_request.field_violations]


def retry_delay(error: grpc.RpcError) -> float:
    status = details_of(error)
    assert len(status.details) == 1, status
    retry_info = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(retry_info), status.details[0].type_url
    return retry_info.retry_delay.ToTimedelta().total_seconds()


def call_error(call, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as error:
        call(request, timeout=60)
    return error.value


def tensor(shape):
    return array_tensor(np.ones(shape, np.float32), "float32")


def bad_requests(stub, session_id):
    """(call, request, the field its INVALID_ARGUMENT names), one or more per RPC."""
    return [
        (stub.Normalize, pb.NormalizeRequest(kind=pb.RMS_NORM, input=tensor((2, 4)),
                                             weight=tensor((3,))), "weight.shape"),
        (stub.Normalize, pb.NormalizeRequest(input=tensor((2, 4))), "kind"),
        (stub.Activate, pb.ActivateRequest(input=tensor((2, 4))), "activation"),
        (stub.Activate, pb.ActivateRequest(activation=pb.SWIGLU, input=tensor((2, 3))),
         "input.shape"),
        (stub.PositionalEncode, pb.PositionalEncodeRequest(), "method"),
        (stub.PositionalEncode,
         pb.PositionalEncodeRequest(rope=pb.Rope(query=tensor((1, 2, 3, 8)),
                                                 positions=[0, 1])),
         "rope.positions"),
        (stub.BlockForward, pb.BlockForwardRequest(hidden_states=tensor((8,))),
         "hidden_states.shape"),
        (stub.BlockForward,
         pb.BlockForwardRequest(hidden_states=tensor((2, DEMO_HIDDEN)), positions=[0, -1]),
         "positions[1]"),
        (stub.BlockForward,
         pb.BlockForwardRequest(session_id=session_id, num_layers=2,
                                hidden_states=tensor((1, DEMO_HIDDEN))),
         "layer_start"),
        (stub.OpenSession, pb.OpenSessionRequest(max_length=-1), "max_length"),
    ]


@pytest.fixture(scope="module")
def demo():
    """The demo model's server and a stub on it."""
    process, channel, stub = started()
    yield process, stub
    stop(process, channel)


def test_every_invalid_argument_names_its_field(demo):
    _, stub = demo
    session_id = stub.OpenSession(pb.OpenSessionRequest(num_layers=1)).session_id
    for call, request, field in bad_requests(stub, session_id):
        error = call_error(call, request)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
        violations = field_violations(error)
        assert violations[0] == (field, error.details()), violations
        assert error.details().startswith((field + ": ", field + ", ")), error.details()


def test_two_fields_named_are_two_violations(demo):
    _, stub = demo
    session_id = stub.OpenSession(pb.OpenSessionRequest(num_layers=1)).session_id
    error = call_error(stub.BlockForward, pb.BlockForwardRequest(
        session_id=session_id, num_layers=2, hidden_states=tensor((1, DEMO_HIDDEN))))
    assert [field for field, _ in field_violations(error)] == ["layer_start", "num_layers"]


def test_other_errors_carry_no_details(demo):
    _, stub = demo
    error = call_error(stub.GetModel, pb.GetModelRequest(name="nope"))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert "grpc-status-details-bin" not in dict(error.trailing_metadata() or ())


def test_full_queue_carries_retry_info():
    process, channel, stub = started("--compute-threads=1", "--max-queue-size=1")
    try:
        blocker = occupy_worker(process, stub)
        queued = stub.Normalize.future(normalize_request(2, 8), timeout=120)
        wait_queued(process, 1)
        error = call_error(stub.Normalize, normalize_request(2, 8))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error.details().startswith("server busy: 1 requests already queued")
        assert retry_delay(error) == 0.1
        blocker.result()
        queued.result()
    finally:
        stop(process, channel)


def test_step_bigger_than_the_kv_cache_carries_no_retry_info():
    """No wait makes it fit (the retriable case, a cache that busy sessions fill, is
    tests/server/session_store_test.cc's)."""
    process, channel, stub = started("--max-kv-cache-bytes=4096")
    try:
        session_id = stub.OpenSession(pb.OpenSessionRequest()).session_id
        error = call_error(stub.BlockForward, pb.BlockForwardRequest(
            session_id=session_id, hidden_states=tensor((8, DEMO_HIDDEN))))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error.details().startswith("KV cache full: ")
        assert "grpc-status-details-bin" not in dict(error.trailing_metadata() or ())
    finally:
        stop(process, channel)


def test_request_too_large_carries_no_retry_info():
    """No retry makes it fit: no RetryInfo to invite one."""
    process, channel, stub = started("--max-request-elements=10")
    try:
        error = call_error(stub.Normalize, normalize_request(2, 8))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "grpc-status-details-bin" not in dict(error.trailing_metadata() or ())
    finally:
        stop(process, channel)
