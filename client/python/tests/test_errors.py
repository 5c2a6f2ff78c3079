"""LayerServeError's standard error details from the real server: the request
field of an INVALID_ARGUMENT (google.rpc.BadRequest) and the retry delay of a
RESOURCE_EXHAUSTED (google.rpc.RetryInfo), beside the unchanged code and message."""
from concurrent import futures

import grpc
import numpy as np
import pytest

from conftest import stop_cleanly
from layerserve_client import Client, LayerServeError
from server_process import ServerProcess, wait_for


def test_invalid_argument_names_the_field(client):
    with pytest.raises(LayerServeError) as error:
        client.normalize(np.ones((2, 4), np.float32), "rms", weight=np.ones(3, np.float32))
    e = error.value
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.details.startswith("weight.shape: length 3 does not match")
    assert e.field_violations == [("weight.shape", e.details)]
    assert e.retry_delay is None


def test_block_forward_names_the_field(client):
    with pytest.raises(LayerServeError) as error:
        client.block_forward(np.ones((2, 512), np.float32), positions=[0, -1])
    assert [field for field, _ in error.value.field_violations] == ["positions[1]"]


def test_errors_raised_before_sending_have_no_details(client):
    with pytest.raises(LayerServeError) as error:
        client.normalize(np.ones((2, 4), np.float32), "nope")
    assert error.value.attempts == 0
    assert error.value.field_violations == [] and error.value.retry_delay is None


def test_full_queue_gives_a_retry_delay():
    """One worker kept busy by a long BlockForward, one request queued behind it
    (--max-queue-size=1): the next is refused with the server's retry delay."""
    process = ServerProcess("--compute-threads=1", "--max-queue-size=1")
    try:
        with Client(process.target, timeout=120) as client:
            def queue_leavers():
                return process.metric_sum("layerserve_queue_duration_seconds_count",
                                          method="BlockForward")
            hidden = np.random.default_rng(1).standard_normal((4, 1024, 512)).astype(np.float32)
            with futures.ThreadPoolExecutor(2) as pool:
                blocker = pool.submit(client.block_forward, hidden, num_layers=4)
                assert wait_for(lambda: queue_leavers() > 0, timeout=60)
                queued = pool.submit(client.normalize, np.ones((2, 8), np.float32), "rms")
                assert wait_for(lambda: process.metric_value("layerserve_queue_depth") == 1,
                                timeout=60)
                with pytest.raises(LayerServeError) as error:
                    client.normalize(np.ones((2, 8), np.float32), "rms")
                assert not blocker.done(), "the blocker finished too soon to mean much"
                blocker.result()
                queued.result()
        e = error.value
        assert e.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert e.details.startswith("server busy: 1 requests already queued")
        assert e.retry_delay == 0.1
        assert e.field_violations == []
    finally:
        stop_cleanly(process)
