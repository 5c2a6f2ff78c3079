"""Faults through the real server: a client killed with calls in flight, a storm of
calls with 1-5 ms deadlines, a call whose deadline passes while it computes, and
requests at and just over every configured limit.
Each time the server keeps serving everyone else, answers each call with the right
code, and its requests_total accounts for every call that reached it.

Covered elsewhere, not repeated here: SIGTERM under load (test_shutdown.py,
test_serving.py), --max-queue-size (test_serving.py: two fit, the third is refused),
a repository with corrupt models at start (test_model_repository.py)."""
import os
import random
import re
import signal
import subprocess
import sys
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


def codes(server, method):
    """{code: requests_total} of `method`, for the codes it has answered (every
    series exists at 0 from the start)."""
    return {labels["code"]: value
            for labels, value in parse_samples(server.metrics(), "layerserve_requests_total")
            if labels["method"] == method and value}


def delta(after, before):
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)
            if after.get(k, 0) != before.get(k, 0)}


def computed(server, method):
    return server.metric_sum("layerserve_compute_duration_seconds_count", method=method)


def arrived_bytes(server):
    """Bytes of every BlockForward request the server has accepted so far."""
    return server.metric_sum("layerserve_request_bytes_total", method="BlockForward")


def idle(server):
    """Waits until no call is in flight or queued."""
    assert wait_for(lambda: server.metric_value("layerserve_inflight_requests") == 0
                    and server.metric_value("layerserve_queue_depth") == 0, timeout=60), \
        server.metrics()


def rms_norm_call(rng, rows, dim):
    """(request, expected output) of an RMSNorm without weight."""
    x = rng.standard_normal((rows, dim)).astype(np.float32)
    want = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, -1, keepdims=True) + 1e-6)
    return pb.NormalizeRequest(kind=pb.RMS_NORM, input=array_tensor(x, "float32")), want


def check_rms_norm(reply, want):
    np.testing.assert_allclose(values(reply.output).reshape(want.shape), want, rtol=1e-5,
                               atol=1e-6)


def hidden(rng, *shape):
    return array_tensor(rng.standard_normal(shape).astype(np.float32), "float32")


# A client process that starts `n` BlockForward calls of 256 tokens through all 4
# demo layers, says so with the size of one request, and waits to be killed.
DOOMED_CLIENT = """
import sys, time
import grpc, numpy as np
from layerserve.v1 import layerserve_pb2 as pb, layerserve_pb2_grpc as pb_grpc
target, n = sys.argv[1], int(sys.argv[2])
stub = pb_grpc.LayerServiceStub(grpc.insecure_channel(target))
x = np.random.default_rng(0).standard_normal((1, 256, 512)).astype("<f4")
request = pb.BlockForwardRequest(num_layers=4, hidden_states=pb.Tensor(
    shape=[1, 256, 512], dtype=pb.FLOAT32, data=x.tobytes()))
calls = [stub.BlockForward.future(request, timeout=600) for _ in range(n)]
print("started", request.ByteSize(), flush=True)
time.sleep(600)
"""


def test_client_killed_mid_batch_is_accounted_for_and_others_are_served():
    server, channel, stub = started("--compute-threads=1")
    try:
        rng = np.random.default_rng(1)
        # The other client's BlockForward, computed alone first: under load it must
        # come back bit-identical.
        other_block = pb.BlockForwardRequest(hidden_states=hidden(rng, 1, 8, DEMO_HIDDEN))
        alone = stub.BlockForward(other_block, timeout=60).hidden_states.data
        before_block, before_norm = codes(server, "BlockForward"), codes(server, "Normalize")
        computed_before = computed(server, "BlockForward")

        n = 24
        arrived_before = arrived_bytes(server)
        doomed = subprocess.Popen([sys.executable, "-c", DOOMED_CLIENT, server.target, str(n)],
                                  stdout=subprocess.PIPE, text=True, env=os.environ)
        said, request_bytes = doomed.stdout.readline().split()
        assert said == "started"
        # Arrivals are counted by a counter that never goes down: the in-flight gauge
        # falls as the worker finishes the first calls, maybe before the last arrives.
        assert wait_for(lambda: arrived_bytes(server) - arrived_before == n * int(request_bytes),
                        timeout=120), "the doomed client's calls never all arrived"

        served = {"norm": 0, "block": 0}
        errors = []

        def other_client():
            try:
                local = np.random.default_rng(2)
                end = time.monotonic() + 1.5
                while time.monotonic() < end:
                    request, want = rms_norm_call(local, 4, 64)
                    check_rms_norm(stub.Normalize(request, timeout=60), want)
                    served["norm"] += 1
                    reply = stub.BlockForward(other_block, timeout=60)
                    assert reply.hidden_states.data == alone
                    served["block"] += 1
            except Exception as e:  # Raised again in the test's thread.
                errors.append(e)

        other = threading.Thread(target=other_client)
        other.start()
        time.sleep(0.1)  # A batch of the doomed client's is computing now.
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=30)
        other.join()
        if errors:
            raise errors[0]
        idle(server)

        assert served["norm"] >= 1 and served["block"] >= 1
        block = delta(codes(server, "BlockForward"), before_block)
        # Every call of both clients answered, each OK or (the doomed client's queued
        # ones) CANCELLED: none lost, none failed otherwise.
        assert set(block) <= {"OK", "CANCELLED"}, block
        assert block["OK"] + block.get("CANCELLED", 0) == n + served["block"]
        assert block.get("CANCELLED", 0) >= 1, "the kill came too late to cancel anything"
        # Cancelled calls were dropped before compute, or (the batch running when the
        # client died) stopped between two layers; the others were computed.
        assert computed(server, "BlockForward") - computed_before == block["OK"]
        assert delta(codes(server, "Normalize"), before_norm) == {"OK": served["norm"]}
        assert stub.BlockForward(other_block, timeout=60).hidden_states.data == alone
    finally:
        stop(server, channel)


def queue_seconds(server):
    return server.metric_sum("layerserve_queue_duration_seconds_sum", method="BlockForward")


def test_a_call_whose_deadline_passes_while_it_computes_stops_between_layers():
    server, channel, stub = started("--compute-threads=1")
    try:
        rng = np.random.default_rng(5)
        # 512 tokens through the 4 demo layers: a layer takes a quarter of the call.
        long_call = pb.BlockForwardRequest(num_layers=4,
                                           hidden_states=hidden(rng, 1, 512, DEMO_HIDDEN))
        took = []
        for _ in range(3):
            start = time.monotonic()
            stub.BlockForward(long_call, timeout=120)
            took.append(time.monotonic() - start)
        # The fastest: a deadline at 40% of it falls inside the call even when the
        # machine's load (other tests, sanitizers) slowed the calls timed here.
        whole = min(took)
        idle(server)
        before, computed_before = codes(server, "BlockForward"), computed(server, "BlockForward")
        queued_before = queue_seconds(server)
        # The deadline falls in the second of the 4 layers (an idle server takes the
        # call at once).
        deadline = 0.4 * whole
        with pytest.raises(grpc.RpcError) as error:
            stub.BlockForward(long_call, timeout=deadline)
        assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        idle(server)
        assert delta(codes(server, "BlockForward"), before) == {"DEADLINE_EXCEEDED": 1}
        # Taken by the worker before its deadline, yet never computed to the end:
        # it stopped part-way (a call that expired in the queue would have waited
        # longer than its deadline).
        assert queue_seconds(server) - queued_before < deadline
        assert computed(server, "BlockForward") == computed_before
        # The worker is free and the model unharmed.
        short = pb.BlockForwardRequest(hidden_states=hidden(rng, 1, 3, DEMO_HIDDEN))
        alone = stub.BlockForward(short, timeout=60).hidden_states.data
        assert stub.BlockForward(short, timeout=60).hidden_states.data == alone
    finally:
        stop(server, channel)


def test_deadline_storm_leaves_normal_calls_alone():
    server, channel, stub = started("--compute-threads=1")
    try:
        rng = np.random.default_rng(3)
        normal_block = pb.BlockForwardRequest(hidden_states=hidden(rng, 1, 8, DEMO_HIDDEN))
        alone = stub.BlockForward(normal_block, timeout=60).hidden_states.data
        before = {m: codes(server, m) for m in ["Normalize", "BlockForward", "Activate"]}
        computed_before = {m: computed(server, m) for m in before}

        storm_norm, storm_norm_want = rms_norm_call(rng, 32, DEMO_HIDDEN)
        storm_block = pb.BlockForwardRequest(hidden_states=hidden(rng, 1, 16, DEMO_HIDDEN))
        x = rng.standard_normal((64, DEMO_HIDDEN)).astype(np.float32)
        storm_act = pb.ActivateRequest(activation=pb.RELU, input=array_tensor(x, "float32"))

        picker = random.Random(4)
        calls = []  # (kind, future, expected)
        for i in range(360):
            if i % 6 == 0:  # 60 normal calls with a minute to spare.
                if i % 12 == 0:
                    request, want = rms_norm_call(rng, 8, 64)
                    calls.append(("normal", stub.Normalize.future(request, timeout=60),
                                  ("norm", want)))
                else:
                    calls.append(("normal", stub.BlockForward.future(normal_block, timeout=60),
                                  ("block", alone)))
                continue
            deadline = picker.uniform(0.001, 0.005)
            kind = picker.choice(["norm", "block", "act"])
            if kind == "norm":
                future = stub.Normalize.future(storm_norm, timeout=deadline)
                want = storm_norm_want
            elif kind == "block":
                future = stub.BlockForward.future(storm_block, timeout=deadline)
                want = None
            else:
                future = stub.Activate.future(storm_act, timeout=deadline)
                want = np.maximum(x, 0)
            calls.append(("storm", future, (kind, want)))

        answered = {"normal": {}, "storm": {}}
        for group, future, (kind, want) in calls:
            code = future.code()
            answered[group][code] = answered[group].get(code, 0) + 1
            if code != grpc.StatusCode.OK:
                continue
            reply = future.result()
            if kind == "norm":
                check_rms_norm(reply, want)
            elif kind == "act":
                np.testing.assert_array_equal(values(reply.output).reshape(x.shape), want)
            elif group == "normal":
                assert reply.hidden_states.data == want
            else:
                assert list(reply.hidden_states.shape) == [1, 16, DEMO_HIDDEN]
        assert answered["normal"] == {grpc.StatusCode.OK: 60}
        assert set(answered["storm"]) <= {grpc.StatusCode.OK,
                                          grpc.StatusCode.DEADLINE_EXCEEDED}, answered
        assert answered["storm"].get(grpc.StatusCode.DEADLINE_EXCEEDED, 0) >= 100, answered

        idle(server)
        server_codes = {}
        for method in before:
            for code, count in delta(codes(server, method), before[method]).items():
                server_codes[code] = server_codes.get(code, 0) + count
            # Expired calls were never computed: what was computed was answered OK.
            assert computed(server, method) - computed_before[method] == \
                delta(codes(server, method), before[method]).get("OK", 0), method
        # The server answered OK at least what the clients got as OK (a call can be
        # computed and its answer arrive after the client gave up), and no more calls
        # than were made (many storm calls expire before they are even sent). Calls
        # dropped from the queue are DEADLINE_EXCEEDED; CANCELLED when the client's
        # cancellation (at its own deadline) reached the server a moment before the
        # server's copy of the deadline passed.
        assert set(server_codes) <= {"OK", "DEADLINE_EXCEEDED", "CANCELLED"}, server_codes
        assert server_codes["OK"] >= answered["normal"][grpc.StatusCode.OK] + \
            answered["storm"].get(grpc.StatusCode.OK, 0)
        assert sum(server_codes.values()) <= len(calls)
        assert server_codes.get("DEADLINE_EXCEEDED", 0) >= 1, server_codes

        request, want = rms_norm_call(rng, 3, 16)
        check_rms_norm(stub.Normalize(request, timeout=10), want)
    finally:
        stop(server, channel)


def test_max_message_bytes_at_and_one_byte_over():
    rng = np.random.default_rng(5)
    # position_offset 127 is one varint byte, 128 two: the same request one byte
    # longer, computed the same way.
    at = pb.BlockForwardRequest(hidden_states=hidden(rng, 1, 4, DEMO_HIDDEN),
                                position_offset=127)
    over = pb.BlockForwardRequest()
    over.CopyFrom(at)
    over.position_offset = 128
    limit = at.ByteSize()
    assert over.ByteSize() == limit + 1
    server, channel, stub = started(f"--max-message-bytes={limit}")
    try:
        reply = stub.BlockForward(at, timeout=60)
        assert list(reply.hidden_states.shape) == [1, 4, DEMO_HIDDEN]
        assert reply.hidden_states.data != at.hidden_states.data
        with pytest.raises(grpc.RpcError) as error:
            stub.BlockForward(over, timeout=60)
        assert (error.value.code(), error.value.details()) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"Received message larger than max ({limit + 1} vs. {limit})")
        # Refused by gRPC before the service: not counted, and the server serves on.
        assert codes(server, "BlockForward") == {"OK": 1}
        # A response over the limit cannot be sent either: a 100 x 512 float32
        # sinusoidal table (204,800 bytes of data) from a request of a few bytes. The
        # service answers it, with the numbers, and counts it as refused.
        with pytest.raises(grpc.RpcError) as error:
            stub.PositionalEncode(pb.PositionalEncodeRequest(
                sinusoidal=pb.Sinusoidal(num_positions=100, dim=DEMO_HIDDEN)), timeout=60)
        assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert re.fullmatch(
            r"response too large: 2048\d\d bytes, over the server's limit of "
            f"{limit}" r" \(--max-message-bytes\); ask for less per request "
            r"\(fewer rows, a 16-bit output_dtype\)", error.value.details()), \
            error.value.details()
        assert codes(server, "PositionalEncode") == {"RESOURCE_EXHAUSTED": 1}
        assert stub.BlockForward(at, timeout=60).hidden_states.data == reply.hidden_states.data
    finally:
        stop(server, channel)


def sinusoidal_table(rows, dim):
    """The concatenated sin/cos table of the proto's formula, base 10000."""
    angle = np.arange(rows, dtype=np.float64)[:, None] * \
        10000.0 ** (-np.arange(0, dim, 2) / dim)
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)


def test_max_request_elements_at_and_one_over_for_every_method():
    limit = 4096
    server, channel, stub = started(f"--max-request-elements={limit}")

    def over_message(count):
        return (f"request too large: {count} values, over the server's limit of {limit} "
                "(--max-request-elements); split it into smaller requests")

    try:
        rng = np.random.default_rng(6)
        # Normalize: [64, 64] fits, [1, 4097] does not.
        request, want = rms_norm_call(rng, 64, 64)
        check_rms_norm(stub.Normalize(request, timeout=30), want)
        over_cases = [(stub.Normalize, rms_norm_call(rng, 1, limit + 1)[0], limit + 1)]

        # Activate, packed SwiGLU [32, 128] = 4096 values: silu(gate) * up.
        packed = rng.standard_normal((32, 128)).astype(np.float32)
        reply = stub.Activate(pb.ActivateRequest(activation=pb.SWIGLU,
                                                 input=array_tensor(packed, "float32")),
                              timeout=30)
        gate, up = packed[:, :64].astype(np.float64), packed[:, 64:].astype(np.float64)
        np.testing.assert_allclose(values(reply.output).reshape(32, 64),
                                   gate / (1 + np.exp(-gate)) * up, rtol=1e-5, atol=1e-6)
        x = rng.standard_normal((1, limit + 1)).astype(np.float32)
        over_cases.append((stub.Activate,
                           pb.ActivateRequest(activation=pb.RELU, input=array_tensor(x, "float32")),
                           limit + 1))

        # PositionalEncode: a table asked for counts as much as one sent.
        reply = stub.PositionalEncode(pb.PositionalEncodeRequest(sinusoidal=pb.Sinusoidal(
            num_positions=8, dim=DEMO_HIDDEN, layout=pb.Sinusoidal.CONCATENATED)), timeout=30)
        np.testing.assert_allclose(values(reply.output).reshape(8, DEMO_HIDDEN),
                                   sinusoidal_table(8, DEMO_HIDDEN), rtol=1e-5, atol=1e-5)
        over_cases.append((stub.PositionalEncode, pb.PositionalEncodeRequest(
            sinusoidal=pb.Sinusoidal(num_positions=2049, dim=2)), limit + 2))
        # RoPE: query and key together, [1, 1, 1024, 2] each (head dim 2: one pair
        # rotated by angle p at position p); 1025 positions are 4100 values.
        q = rng.standard_normal((1, 1, 1024, 2)).astype(np.float32)
        k = rng.standard_normal((1, 1, 1024, 2)).astype(np.float32)
        reply = stub.PositionalEncode(pb.PositionalEncodeRequest(rope=pb.Rope(
            query=array_tensor(q, "float32"), key=array_tensor(k, "float32"))), timeout=30)
        p = np.arange(1024, dtype=np.float64)
        for got, x in [(reply.output, q), (reply.key, k)]:
            x0, x1 = x[0, 0, :, 0].astype(np.float64), x[0, 0, :, 1].astype(np.float64)
            want = np.stack([x0 * np.cos(p) - x1 * np.sin(p), x1 * np.cos(p) + x0 * np.sin(p)],
                            -1)
            np.testing.assert_allclose(values(got).reshape(1024, 2), want, rtol=1e-4,
                                       atol=1e-4)
        over_cases.append((stub.PositionalEncode, pb.PositionalEncodeRequest(rope=pb.Rope(
            query=hidden(rng, 1, 1, 1025, 2), key=hidden(rng, 1, 1, 1025, 2))), 4100))
        # ALiBi bias [H, Tq, Tk]: 4 x 32 x 32 fits, 4 x 32 x 33 does not.
        reply = stub.PositionalEncode(pb.PositionalEncodeRequest(
            alibi=pb.Alibi(num_heads=4, query_length=32, key_length=32)), timeout=30)
        assert list(reply.output.shape) == [4, 32, 32]
        over_cases.append((stub.PositionalEncode, pb.PositionalEncodeRequest(
            alibi=pb.Alibi(num_heads=4, query_length=32, key_length=33)), 4 * 32 * 33))

        # BlockForward: [8, 512] fits; [1, 9, 512] does not.
        block = pb.BlockForwardRequest(hidden_states=hidden(rng, 8, DEMO_HIDDEN))
        reply = stub.BlockForward(block, timeout=60)
        assert list(reply.hidden_states.shape) == [8, DEMO_HIDDEN]
        assert np.all(np.isfinite(values(reply.hidden_states)))
        over_cases.append((stub.BlockForward, pb.BlockForwardRequest(
            hidden_states=hidden(rng, 1, 9, DEMO_HIDDEN)), 9 * DEMO_HIDDEN))

        for call, request, count in over_cases:
            with pytest.raises(grpc.RpcError) as error:
                call(request, timeout=30)
            assert (error.value.code(), error.value.details()) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED, over_message(count)), request
        idle(server)
        # Refused before the queue: counted, never computed.
        for method, ok, refused in [("Normalize", 1, 1), ("Activate", 1, 1),
                                    ("PositionalEncode", 3, 3), ("BlockForward", 1, 1)]:
            assert codes(server, method) == {"OK": ok, "RESOURCE_EXHAUSTED": refused}, method
            assert computed(server, method) == ok, method
    finally:
        stop(server, channel)


def test_request_over_max_batch_rows_runs_alone_and_batches_stay_under_it():
    server, channel, stub = started("--compute-threads=1", "--max-batch-rows=8")
    try:
        rng = np.random.default_rng(7)
        names = ["nine", "one_a", "one_b", "eight", "one_c"]
        requests = {name: pb.BlockForwardRequest(hidden_states=hidden(rng, rows, DEMO_HIDDEN))
                    for name, rows in zip(names, [9, 1, 1, 8, 1])}
        alone = {name: stub.BlockForward(r, timeout=60).hidden_states.data
                 for name, r in requests.items()}

        def batches():
            return (server.metric_sum("layerserve_batch_size_count", method="BlockForward"),
                    server.metric_sum("layerserve_batch_size_sum", method="BlockForward"),
                    server.metric_sum("layerserve_batch_rows_sum", method="BlockForward"))

        assert batches() == (5, 5, 20)  # One at a time: each alone.

        # Keep the only worker busy (4096 tokens through 4 layers: a batch of its own,
        # a second or more), then queue the five in order behind it.
        blocker = stub.BlockForward.future(pb.BlockForwardRequest(
            num_layers=4, hidden_states=hidden(rng, 4, 1024, DEMO_HIDDEN)), timeout=120)
        assert wait_for(lambda: batches()[0] == 6)  # The worker took it.
        futures = {}
        for name in names:
            futures[name] = stub.BlockForward.future(requests[name], timeout=120)
            assert wait_for(lambda: server.metric_value("layerserve_queue_depth") ==
                            len(futures))
        assert not blocker.done(), "the blocker finished too soon for this test to mean much"
        blocker.result()
        for name in names:
            assert futures[name].result().hidden_states.data == alone[name], name
        # First in, first out, no batch over 8 rows unless a request alone is. Decode-
        # sized requests (at most 4 tokens) queue apart from longer ones: [nine] alone
        # (9 > 8), [eight] (nine would make 17), and [one_a, one_b, one_c]: 3 batches
        # of 5 requests and 20 rows, after the blocker's 1 of 4096.
        assert batches() == (5 + 1 + 3, 5 + 1 + 5, 20 + 4096 + 20)
    finally:
        stop(server, channel)
