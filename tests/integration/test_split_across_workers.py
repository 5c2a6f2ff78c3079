"""One request on every core: with --compute-threads=2, a request alone on the server
shares its loops with the idle worker (its linear layers by column ranges, its
attention by KV head, decode steps by output blocks). The split is fixed by the
weights, never by who helps, so the numbers must be bit-identical to a server with
one worker and to the same requests sent while the other worker is busy.

The model is random and Llama-shaped, large enough (hidden 1024, d_ff 2816) that its
up and down projections run as several column ranges."""
import threading

import numpy as np
import pytest

from layerserve.v1 import layerserve_pb2 as pb
from random_llama import write_random_llama
from server_process import started, stop
from wire import array_tensor

HIDDEN = 1024


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    directory = tmp_path_factory.mktemp("models")
    for dtype in ("bfloat16", "float32"):
        write_random_llama(directory / f"wide-{dtype}", hidden=HIDDEN, heads=16,
                           kv_heads=4, ffn=2816, layers=2, dtype=dtype, seed=3)
    return directory


def forward(stub, model, x, **fields):
    return stub.BlockForward(pb.BlockForwardRequest(
        model=model, hidden_states=array_tensor(x, "float32"), num_layers=2, **fields),
        timeout=120).hidden_states.data


def answers(stub, model):
    """A stateless prefill, a padded batch of two, and a session's prefill, decode
    steps and a short continuation: every path a request can take."""
    rng = np.random.default_rng(11)
    out = [forward(stub, model, rng.standard_normal((37, HIDDEN)))]
    batch = rng.standard_normal((2, 9, HIDDEN))
    out.append(stub.BlockForward(pb.BlockForwardRequest(
        model=model, hidden_states=array_tensor(batch, "float32"), num_layers=2,
        sequence_lengths=[9, 5]), timeout=120).hidden_states.data)
    session = stub.OpenSession(pb.OpenSessionRequest(model=model, num_layers=2)).session_id
    out.append(forward(stub, model, rng.standard_normal((20, HIDDEN)), session_id=session))
    for _ in range(3):
        out.append(forward(stub, model, rng.standard_normal((1, HIDDEN)),
                           session_id=session))
    out.append(forward(stub, model, rng.standard_normal((9, HIDDEN)), session_id=session))
    stub.CloseSession(pb.CloseSessionRequest(session_id=session))
    return out


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_split_requests_equal_one_worker_bit_for_bit(repository, dtype):
    model = f"wide-{dtype}"
    weights = f"--weight-dtype={dtype}"
    process, channel, stub = started(f"--model-repository={repository}",
                                     "--compute-threads=1", weights)
    try:
        one_worker = answers(stub, model)
    finally:
        stop(process, channel)

    process, channel, stub = started(f"--model-repository={repository}",
                                     "--compute-threads=2", weights)
    try:
        alone = answers(stub, model)
        assert alone == one_worker, "split across two workers changed a result"
        # The other worker busy with requests of its own: loops are split less, or
        # not at all; the numbers stay the same. Its requests run one layer, so they
        # queue under another batch key and never share a batch with ours: on the
        # AMX Xeon, oneDNN 2.6's matmul gives a row different bits at different
        # batch sizes for inputs of 2816 and more (seen 2026-12-01; see the
        # session note), which is a batching question, not this test's.
        stop_busy = threading.Event()
        busy_errors = []

        def keep_busy():
            rng = np.random.default_rng(1)
            x = rng.standard_normal((64, HIDDEN))
            while not stop_busy.is_set():
                try:
                    stub.BlockForward(pb.BlockForwardRequest(
                        model=model, hidden_states=array_tensor(x, "float32"),
                        num_layers=1), timeout=120)
                except Exception as error:  # pylint: disable=broad-except
                    busy_errors.append(error)
                    return

        busy = threading.Thread(target=keep_busy)
        busy.start()
        try:
            loaded = answers(stub, model)
        finally:
            stop_busy.set()
            busy.join()
        assert not busy_errors
        assert loaded == one_worker, "a result changed with the other worker busy"
    finally:
        stop(process, channel)
