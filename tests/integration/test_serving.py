"""The serving core through the real server: dynamic batching (bit-identical to
running alone, batches larger than one under concurrency), deadlines and
cancellation while queued (answered, never computed), a full queue, the request
size limit, and the numeric-health metrics moving by the right amounts."""
import random
import shutil
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest

from layerserve.v1 import layerserve_pb2 as pb
from metrics_text import parse_samples
from server_process import started, stop, wait_for
from wire import array_tensor, values

DEMO_HIDDEN = 512


def block_request(rng: random.Random, batch: int, tokens: int) -> pb.BlockForwardRequest:
    np_rng = np.random.default_rng(rng.randrange(1 << 30))
    hidden = np_rng.standard_normal((batch, tokens, DEMO_HIDDEN)).astype(np.float32)
    request = pb.BlockForwardRequest(
        hidden_states=array_tensor(hidden, "float32"),
        position_offset=rng.randrange(0, 100),
        num_layers=rng.choice([1, 2]),
        want_attention_stats=rng.random() < 0.5)
    if batch > 1:
        request.sequence_lengths.extend(rng.randint(1, tokens) for _ in range(batch))
    if rng.random() < 0.3:
        request.causal = False
    return request


def test_batched_block_forward_is_bit_identical_to_each_request_alone():
    # A queue delay makes batches form even when a worker is free.
    process, channel, stub = started("--compute-threads=2", "--max-queue-delay-us=3000")
    try:
        rng = random.Random(20261130)
        requests = [block_request(rng, rng.randint(1, 3), rng.randint(1, 8))
                    for _ in range(48)]
        # Alone: one at a time, so every batch holds one request.
        alone = [stub.BlockForward(r, timeout=60) for r in requests]
        before = process.metric_sum("layerserve_batch_size_count", method="BlockForward")
        assert before == len(requests)

        # Together: 16 clients with seeded random think times.
        together = [None] * len(requests)
        order = list(range(len(requests)))
        rng.shuffle(order)

        def client(worker: int):
            local = random.Random(worker)
            for i in order[worker::16]:
                time.sleep(local.uniform(0, 0.004))
                together[i] = stub.BlockForward(requests[i], timeout=60)

        threads = [threading.Thread(target=client, args=(w,)) for w in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, (a, b) in enumerate(zip(alone, together)):
            assert b is not None, i
            assert a.hidden_states.data == b.hidden_states.data, f"request {i} differs"
            assert a.attention_stats == b.attention_stats, f"request {i} stats differ"

        batches = (process.metric_sum("layerserve_batch_size_count", method="BlockForward")
                   - before)
        singles = (process.metric_sum("layerserve_batch_size_bucket", method="BlockForward",
                                      le="1")
                   - before)
        assert batches < len(requests), "no batch held more than one request"
        assert singles < batches
    finally:
        stop(process, channel)


def normalize_request(rows: int, dim: int) -> pb.NormalizeRequest:
    x = np.arange(rows * dim, dtype=np.float32).reshape(rows, dim) % 7
    return pb.NormalizeRequest(kind=pb.RMS_NORM, input=array_tensor(x, "float32"))


@pytest.fixture(scope="module")
def one_worker():
    """One compute thread and room for two queued requests."""
    process, channel, stub = started("--compute-threads=1", "--max-queue-size=2")
    yield process, stub
    stop(process, channel)


def occupy_worker(process, stub):
    """Starts a BlockForward that keeps the only worker busy for a while (about a
    second: 4 x 1024 tokens through the demo model's 4 layers; many more under a
    sanitizer) and returns once it computes. The server counts a request's queue
    time when a worker takes it, so that counter moving is the moment it left the
    queue: no guessed sleep, however slow the build."""
    rng = random.Random(1)
    request = block_request(rng, 4, 1024)
    request.num_layers = 4
    request.ClearField("sequence_lengths")
    request.position_offset = 0
    taken = queue_leavers(process, "BlockForward")
    future = stub.BlockForward.future(request, timeout=300)
    assert wait_for(lambda: queue_leavers(process, "BlockForward") > taken, timeout=60), \
        "the blocker never started computing"
    return future


def queue_leavers(process, method):
    """How many `method` requests workers have taken from the queue so far."""
    return process.metric_sum("layerserve_queue_duration_seconds_count", method=method)


def wait_queued(process, depth):
    """Waits until `depth` requests wait in the queue (behind the blocker)."""
    assert wait_for(lambda: process.metric_value("layerserve_queue_depth") == depth,
                    timeout=60), process.metrics()


def test_deadline_passing_in_the_queue_is_answered_and_never_computed(one_worker):
    process, stub = one_worker
    blocker = occupy_worker(process, stub)
    late = stub.Normalize.future(normalize_request(2, 8), timeout=0.3)
    wait_queued(process, 1)  # It reached the server: its deadline passes there.
    assert late.exception(timeout=60).code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert not blocker.done(), "the blocker finished too soon for this test to mean much"
    blocker.result()
    assert wait_for(lambda: process.metric_sum(
        "layerserve_requests_total", method="Normalize", code="DEADLINE_EXCEEDED") == 1)
    assert process.metric_sum("layerserve_compute_duration_seconds_count",
                              method="Normalize") == 0


def test_cancelled_while_queued_is_dropped_before_compute(one_worker):
    process, stub = one_worker
    blocker = occupy_worker(process, stub)
    future = stub.Normalize.future(normalize_request(2, 8))
    wait_queued(process, 1)
    assert future.cancel()
    assert not blocker.done()
    blocker.result()
    assert wait_for(lambda: process.metric_sum(
        "layerserve_requests_total", method="Normalize", code="CANCELLED") == 1)
    assert process.metric_sum("layerserve_compute_duration_seconds_count",
                              method="Normalize") == 0


def test_full_queue_answers_resource_exhausted_at_once(one_worker):
    process, stub = one_worker
    blocker = occupy_worker(process, stub)
    futures = [stub.Normalize.future(normalize_request(2, 8), timeout=120)
               for _ in range(5)]
    # Three are answered while the blocker still computes: none of them waited.
    assert wait_for(lambda: sum(f.done() for f in futures) >= 3, timeout=60)
    wait_queued(process, 2)
    refused = [f for f in futures if f.done()]
    assert not blocker.done(), "the blocker finished too soon for this test to mean much"
    assert len(refused) == 3, "two fit in the queue, the other three are refused at once"
    for f in refused:
        assert f.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f.details() == ("server busy: 2 requests already queued "
                               "(--max-queue-size=2); retry later or on another replica")
    blocker.result()
    for f in futures:
        if f not in refused:
            assert len(f.result().output.data) == 2 * 8 * 4


def test_request_over_the_element_limit_is_refused_naming_the_limit():
    process, channel, stub = started("--max-request-elements=1000")
    try:
        assert len(stub.Normalize(normalize_request(10, 100)).output.data) == 4000
        for call, request, values_count in [
                (stub.Normalize, normalize_request(7, 143), 1001),
                (stub.BlockForward,
                 pb.BlockForwardRequest(hidden_states=array_tensor(
                     np.zeros((2, DEMO_HIDDEN), np.float32), "float32")), 1024)]:
            with pytest.raises(grpc.RpcError) as error:
                call(request)
            assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert error.value.details() == (
                f"request too large: {values_count} values, over the server's limit of "
                "1000 (--max-request-elements); split it into smaller requests")
    finally:
        stop(process, channel)


def test_numeric_health_metrics_count_what_was_sent(server, stub):
    def m(name, **labels):
        return server.metric_sum(name, **labels)

    def nonfinite():
        """Normalize's NaN and Inf counters, input and output."""
        return {k: m("layerserve_nonfinite_values_total", method="Normalize", where=w,
                     kind=kind)
                for k, (w, kind) in {"in_nan": ("input", "nan"), "in_inf": ("input", "inf"),
                                     "out_nan": ("output", "nan"),
                                     "out_inf": ("output", "inf")}.items()}

    before = nonfinite()
    zero_rows = m("layerserve_zero_variance_rows_total")
    # Row 0: one NaN; row 1: two NaN; row 2: +Inf and -Inf; row 3: finite; row 4:
    # zeros. As in PyTorch (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)),
    # a row with a NaN normalizes to all NaN, and a row with +-Inf (and no NaN) to
    # NaN at each Inf and zeros elsewhere: mean(x^2) is +Inf, rsqrt(+Inf) = 0, and
    # Inf * 0 is NaN. So 4 + 4 + 2 NaN out.
    nan, inf = float("nan"), float("inf")
    x = np.array([[nan, 1, 2, 3], [nan, nan, 1, 1], [inf, -inf, 1, 2], [1, 2, 3, 4],
                  [0, 0, 0, 0]], np.float32)
    response = stub.Normalize(pb.NormalizeRequest(kind=pb.RMS_NORM,
                                                  input=array_tensor(x, "float32")))
    y = np.frombuffer(response.output.data, "<f4").reshape(x.shape)
    assert np.isnan(y[:2]).all()
    assert np.isnan(y[2, :2]).all() and np.array_equal(y[2, 2:], [0, 0])
    assert np.isfinite(y[3:]).all()
    assert wait_for(lambda: m("layerserve_zero_variance_rows_total") == zero_rows + 1)
    after = nonfinite()
    assert {k: after[k] - before[k] for k in after} == {
        "in_nan": 3, "in_inf": 2, "out_nan": 10, "out_inf": 0}

    # An Inf alone in a request, where the weight is 0: Inf * rsqrt(Inf) = Inf * 0
    # is NaN, and so is NaN * 0, so the output holds one NaN and the server reads
    # the input and counts the Inf.
    before = after
    x = np.array([[1, inf, 2, 3], [1, 2, 3, 4]], np.float32)
    response = stub.Normalize(pb.NormalizeRequest(
        kind=pb.RMS_NORM, input=array_tensor(x, "float32"),
        weight=array_tensor(np.array([1, 0, 1, 1], np.float32), "float32")))
    y = np.frombuffer(response.output.data, "<f4").reshape(x.shape)
    assert np.isnan(y[0, 1]) and np.array_equal(y[0, [0, 2, 3]], [0, 0, 0])
    assert wait_for(lambda: nonfinite()["out_nan"] == before["out_nan"] + 1)
    after = nonfinite()
    assert {k: after[k] - before[k] for k in after} == {
        "in_nan": 0, "in_inf": 1, "out_nan": 1, "out_inf": 0}

    # The server reads a norm's input for NaN and Inf only when the output has some
    # (a NaN or Inf in, a NaN out: above, RMSNorm's at the very element; below,
    # LayerNorm makes the whole row NaN). LayerNorm, with a weight of zeros and ones:
    # row 0 holds +Inf first, row 1 a NaN where the weight is 0; row 2 is finite
    # but its variance overflows float32, which makes it NaN with no non-finite
    # input. A finite request after them moves no input counter.
    before = after
    x = np.array([[inf, 1, 2, 3], [1, 2, nan, 4], [3e38, -3e38, 3e38, -3e38],
                  [1, 2, 3, 4]], np.float32)
    weight = np.array([1, 1, 0, 1], np.float32)
    with_weight = pb.NormalizeRequest(kind=pb.LAYER_NORM, input=array_tensor(x, "float32"),
                                      weight=array_tensor(weight, "float32"))
    finite_only = pb.NormalizeRequest(kind=pb.LAYER_NORM, input=array_tensor(x[3:], "float32"))
    stub.Normalize(with_weight)
    stub.Normalize(finite_only)
    assert wait_for(lambda: m("layerserve_nonfinite_values_total", method="Normalize",
                              where="output", kind="nan") == before["out_nan"] + 12)
    after = nonfinite()
    assert {k: after[k] - before[k] for k in after} == {
        "in_nan": 1, "in_inf": 1, "out_nan": 12, "out_inf": 0}

    # RMSNorm of [3, 4] is [0.8485, 1.1314]: RMS 1, abs-max 1.1314.
    abs_max = m("layerserve_output_abs_max_sum", method="Normalize")
    rms = m("layerserve_output_rms_sum", method="Normalize")
    stub.Normalize(pb.NormalizeRequest(kind=pb.RMS_NORM, epsilon=0,
                                       input=array_tensor(np.array([[3, 4]], np.float32),
                                                          "float32")))
    assert m("layerserve_output_abs_max_sum", method="Normalize") - abs_max == \
        pytest.approx(4 / np.sqrt(12.5), rel=1e-6)
    assert m("layerserve_output_rms_sum", method="Normalize") - rms == \
        pytest.approx(1.0, rel=1e-6)

    # float16 output: 1e5 does not fit (max 65504) and is sent as +Inf.
    saturated = m("layerserve_saturated_values_total", dtype="float16")
    response = stub.Normalize(pb.NormalizeRequest(
        kind=pb.RMS_NORM, output_dtype=pb.FLOAT16,
        input=array_tensor(np.array([[1, 1]], np.float32), "float32"),
        weight=array_tensor(np.array([1e5, 1], np.float32), "float32")))
    assert np.isinf(np.frombuffer(response.output.data, "<f2")[0])
    assert m("layerserve_saturated_values_total", dtype="float16") - saturated == 1

    # Attention entropy: one token attends to itself only (0 nats); eight tokens
    # without a causal mask spread their attention (> 0).
    count = m("layerserve_attention_entropy_nats_count", model="demo")
    total = m("layerserve_attention_entropy_nats_sum", model="demo")
    one = np.random.default_rng(3).standard_normal((1, DEMO_HIDDEN)).astype(np.float32)
    stub.BlockForward(pb.BlockForwardRequest(hidden_states=array_tensor(one, "float32")))
    assert m("layerserve_attention_entropy_nats_count", model="demo") == count + 1
    assert m("layerserve_attention_entropy_nats_sum", model="demo") == total
    eight = np.random.default_rng(4).standard_normal((8, DEMO_HIDDEN)).astype(np.float32)
    stub.BlockForward(pb.BlockForwardRequest(hidden_states=array_tensor(eight, "float32"),
                                             causal=False))
    assert m("layerserve_attention_entropy_nats_sum", model="demo") > total


def test_byte_counters_match_the_serialized_messages(server, stub):
    request = normalize_request(3, 16)
    before_in = server.metric_sum("layerserve_request_bytes_total", method="Normalize")
    before_out = server.metric_sum("layerserve_response_bytes_total", method="Normalize")
    response = stub.Normalize(request)
    assert wait_for(lambda: server.metric_sum(
        "layerserve_response_bytes_total", method="Normalize") > before_out)
    assert server.metric_sum("layerserve_request_bytes_total", method="Normalize") - \
        before_in == request.ByteSize()
    assert server.metric_sum("layerserve_response_bytes_total", method="Normalize") - \
        before_out == response.ByteSize()


def test_block_forward_and_session_metrics_carry_the_model(server, stub):
    """requests_total and request_duration_seconds of BlockForward and OpenSession,
    and decode_step_duration_seconds, carry the served model's name (the default
    model's for an empty name); a call naming no served model keeps the method's
    series, so a client cannot make a series per name it sends."""
    def m(name, **labels):
        return server.metric_sum(name, **labels)

    def count(method, code, **model):
        return m("layerserve_requests_total", method=method, code=code, **model)

    # Every code of the model's calls exists from start-up, at 0 or more.
    text = server.metrics()
    codes = {labels["code"] for labels, _ in parse_samples(text, "layerserve_requests_total")
             if labels.get("model") == "demo" and labels["method"] == "BlockForward"}
    assert {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "OUT_OF_RANGE", "INTERNAL"} <= codes

    ok = count("BlockForward", "OK", model="demo")
    took = m("layerserve_request_duration_seconds_count", method="BlockForward",
             model="demo")
    stub.BlockForward(pb.BlockForwardRequest(hidden_states=array_tensor(
        np.ones((2, DEMO_HIDDEN), np.float32), "float32")))
    assert wait_for(lambda: count("BlockForward", "OK", model="demo") == ok + 1)
    assert m("layerserve_request_duration_seconds_count", method="BlockForward",
             model="demo") == took + 1

    not_found = count("BlockForward", "NOT_FOUND")
    with pytest.raises(grpc.RpcError) as refused:
        stub.BlockForward(pb.BlockForwardRequest(model="no-such-model", hidden_states=(
            array_tensor(np.ones((2, DEMO_HIDDEN), np.float32), "float32"))))
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    assert wait_for(lambda: count("BlockForward", "NOT_FOUND") == not_found + 1)
    text = server.metrics()
    for name in ["layerserve_requests_total", "layerserve_request_duration_seconds_count"]:
        assert all(labels.get("model") != "no-such-model"
                   for labels, _ in parse_samples(text, name)), name

    opened = count("OpenSession", "OK", model="demo")
    steps = m("layerserve_decode_step_duration_seconds_count", model="demo")
    session = stub.OpenSession(pb.OpenSessionRequest())
    try:
        for tokens in [3, 1]:
            stub.BlockForward(pb.BlockForwardRequest(
                session_id=session.session_id,
                hidden_states=array_tensor(np.ones((tokens, DEMO_HIDDEN), np.float32),
                                           "float32")))
    finally:
        stub.CloseSession(pb.CloseSessionRequest(session_id=session.session_id))
    assert count("OpenSession", "OK", model="demo") == opened + 1
    assert wait_for(lambda: m("layerserve_decode_step_duration_seconds_count",
                              model="demo") == steps + 1)


def test_every_design_metric_is_exported_and_passes_promtool(server, stub):
    stub.Normalize(normalize_request(2, 4))
    stub.BlockForward(pb.BlockForwardRequest(hidden_states=array_tensor(
        np.ones((2, DEMO_HIDDEN), np.float32), "float32")))
    text = server.metrics()
    for name in ["request_duration_seconds", "queue_duration_seconds",
                 "compute_duration_seconds", "requests_total", "batch_size", "batch_rows",
                 "queue_depth", "inflight_requests", "request_bytes_total",
                 "response_bytes_total", "output_abs_max", "output_rms",
                 "saturated_values_total", "zero_variance_rows_total",
                 "attention_entropy_nats", "build_info", "model_info",
                 "model_reloads_total"]:
        assert f"# TYPE layerserve_{name} " in text, name
    check = subprocess.run([shutil.which("promtool"), "check", "metrics"], input=text,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_sigterm_lets_running_and_queued_calls_finish():
    process, channel, stub = started("--compute-threads=1", "--shutdown-grace=60s")
    try:
        blocker = occupy_worker(process, stub)
        queued = [stub.Normalize.future(normalize_request(4, 8), timeout=300)
                  for _ in range(3)]
        queued.append(stub.BlockForward.future(block_request(random.Random(5), 2, 4),
                                               timeout=300))
        wait_queued(process, 4)  # Accepted before the drain begins.
        process.proc.send_signal(subprocess.signal.SIGTERM)
        assert wait_for(lambda: "draining" in process.output(), timeout=60)
        with pytest.raises(grpc.RpcError) as error:
            stub.Normalize(normalize_request(1, 8), timeout=10)
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE
        assert len(blocker.result().hidden_states.data) == 4 * 1024 * DEMO_HIDDEN * 4
        want = expected_rms_norm(normalize_request(4, 8))
        for f in queued[:3]:
            np.testing.assert_allclose(values(f.result().output), want, rtol=1e-6)
        assert queued[3].result().hidden_states.data
    finally:
        channel.close()
    assert process.stop() == 0, process.output()


def expected_rms_norm(request: pb.NormalizeRequest) -> np.ndarray:
    """RMSNorm (default epsilon, no weight) of the request's input, flat."""
    x = values(request.input).reshape(list(request.input.shape))
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)).ravel()


def test_max_connection_age_recycles_connections_without_failing_calls():
    process, channel, stub = started("--max-connection-age=300ms",
                                     "--max-connection-age-grace=5s")
    states = []
    channel.subscribe(states.append, try_to_connect=True)
    try:
        end = time.monotonic() + 2.0
        calls = 0
        while time.monotonic() < end:
            assert len(stub.Normalize(normalize_request(2, 8), timeout=10).output.data) == 64
            calls += 1
            time.sleep(0.01)
        ready = [i for i, s in enumerate(states) if s == grpc.ChannelConnectivity.READY]
        # The server sent GOAWAY after 300 ms: the channel left READY and came back.
        assert len(ready) >= 2, states
        assert calls > 20
    finally:
        channel.unsubscribe(states.append)
        stop(process, channel)
