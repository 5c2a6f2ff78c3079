"""Many KV-cache sessions in one BlockForward call (session_ids) through the real
server: bit-identical to the same steps sent as separate session_id calls (every
golden architecture, ragged steps, prefills run whole and in chunks, sessions
crossing a KV-cache block), all or nothing when one session is unknown, closed,
repeated or mismatched (the others' next steps equal steps that never saw the
failed call), every error naming its field, the Open Inference Protocol's
`session_ids` parameter, and the metrics counting each session's step."""
import json
import os

import grpc
import numpy as np
import pytest

from layerserve.v1 import layerserve_pb2 as pb
from server_process import SOURCE_DIR, started, stop
from wire import array_tensor, values

MODELS = os.path.join(SOURCE_DIR, "tests", "golden", "models")
ARCHITECTURES = sorted(os.listdir(MODELS))
SESSIONS = 8


def config(model):
    with open(os.path.join(MODELS, model, "config.json")) as f:
        return json.load(f)


def hidden_size(model):
    c = config(model)
    return c.get("hidden_size") or c["n_embd"]


def num_layers(model):
    c = config(model)
    return c.get("num_hidden_layers") or c["n_layer"]


@pytest.fixture(scope="module")
def whole():
    process, channel, stub = started(f"--model-repository={MODELS}",
                                     "--prefill-chunk-tokens=0")
    yield process, stub
    stop(process, channel)


@pytest.fixture(scope="module")
def chunked():
    process, channel, stub = started(f"--model-repository={MODELS}",
                                     "--prefill-chunk-tokens=3")
    yield process, stub
    stop(process, channel)


def open_sessions(stub, model, n=SESSIONS):
    return [stub.OpenSession(pb.OpenSessionRequest(model=model,
                                                   num_layers=num_layers(model))).session_id
            for _ in range(n)]


def call(stub, hidden, **fields):
    return stub.BlockForward(pb.BlockForwardRequest(
        hidden_states=array_tensor(hidden, "float32"), **fields), timeout=60)


def separate(stub, ids, rows, lengths):
    """Each row's real tokens as its own session_id call: outputs padded like a
    multi-session answer, and each session's length."""
    out = np.zeros_like(rows)
    session_lengths = []
    for b, s in enumerate(ids):
        response = call(stub, rows[b, :lengths[b]], session_id=s)
        out[b, :lengths[b]] = values(response.hidden_states).reshape(lengths[b], -1)
        session_lengths.append(response.session_length)
    return out, session_lengths


def together(stub, ids, rows, lengths):
    response = call(stub, rows, session_ids=ids, sequence_lengths=lengths)
    assert list(response.hidden_states.shape) == list(rows.shape)
    assert response.session_length == 0
    return values(response.hidden_states).reshape(rows.shape), list(response.session_lengths)


def run_both(stub, model, calls):
    """Runs `calls` (each: rows [B, T, D] and lengths [B]) on two sets of sessions,
    separately and together; asserts they answer the same bytes."""
    a, b = open_sessions(stub, model), open_sessions(stub, model)
    for rows, lengths in calls:
        want, want_lengths = separate(stub, a, rows, lengths)
        got, got_lengths = together(stub, b, rows, lengths)
        assert got_lengths == want_lengths
        assert np.array_equal(got, want), np.max(np.abs(got - want))
    for s in a + b:
        stub.CloseSession(pb.CloseSessionRequest(session_id=s))


def ragged_calls(rng, d, prefill_max, steps):
    """A ragged prefill of up to prefill_max tokens per session, ragged multi-token
    steps, then single-token decode steps."""
    lengths = [int(n) for n in rng.integers(1, prefill_max + 1, size=SESSIONS)]
    calls = [(rng.standard_normal((SESSIONS, max(lengths), d)).astype(np.float32), lengths)]
    lengths = [int(n) for n in rng.integers(1, 4, size=SESSIONS)]
    calls.append((rng.standard_normal((SESSIONS, 3, d)).astype(np.float32), lengths))
    for _ in range(steps):
        calls.append((rng.standard_normal((SESSIONS, 1, d)).astype(np.float32),
                      [1] * SESSIONS))
    return calls


@pytest.mark.parametrize("model", ARCHITECTURES)
def test_one_call_equals_separate_calls_bit_for_bit(whole, model):
    _, stub = whole
    # The smallest golden model holds 16 tokens: 8 + 3 + 4 fit.
    run_both(stub, model, ragged_calls(np.random.default_rng(21), hidden_size(model),
                                       prefill_max=8, steps=4))


@pytest.mark.parametrize("model", ARCHITECTURES)
def test_chunked_prefills_of_many_sessions_equal_separate_calls(chunked, model):
    """Chunks of 3: the sessions' prefills run side by side, each its own real
    tokens of the chunk, like a separate call cut at the same places."""
    _, stub = chunked
    run_both(stub, model, ragged_calls(np.random.default_rng(22), hidden_size(model),
                                       prefill_max=8, steps=2))


def test_sessions_crossing_a_kv_block_boundary(whole, chunked):
    """Prefills of 60-63 tokens, then steps: every session's cache crosses the
    64-token block inside a multi-session call."""
    d = hidden_size("tiny-llama")
    rng = np.random.default_rng(23)
    lengths = [60 + b % 4 for b in range(SESSIONS)]
    calls = [(rng.standard_normal((SESSIONS, 63, d)).astype(np.float32), lengths)]
    for _ in range(6):
        calls.append((rng.standard_normal((SESSIONS, 1, d)).astype(np.float32),
                      [1] * SESSIONS))
    for _, stub in (whole, chunked):
        run_both(stub, "tiny-llama", calls)


def expect_error(stub, code, starts, hidden, **fields):
    with pytest.raises(grpc.RpcError) as error:
        call(stub, hidden, **fields)
    assert error.value.code() == code, error.value.details()
    assert error.value.details().startswith(starts), error.value.details()


def test_a_failed_call_advances_no_session(whole):
    """One of 8 sessions unknown, closed, repeated or of another model: the call
    fails naming the row, and the other sessions' next step equals that of twins
    that never saw the failed call."""
    _, stub = whole
    d = hidden_size("tiny-llama")
    rng = np.random.default_rng(24)
    prompt = rng.standard_normal((SESSIONS, 5, d)).astype(np.float32)
    step = rng.standard_normal((SESSIONS, 1, d)).astype(np.float32)
    ids, twins = open_sessions(stub, "tiny-llama"), open_sessions(stub, "tiny-llama")
    call(stub, prompt, session_ids=ids)
    call(stub, prompt, session_ids=twins)
    closed = open_sessions(stub, "tiny-llama", 1)[0]
    stub.CloseSession(pb.CloseSessionRequest(session_id=closed))
    other_model = open_sessions(stub, "tiny-qwen2", 1)[0]
    prefix = ids[0][:ids[0].rfind(".")]

    def with_row(row, id):
        return ids[:row] + [id] + ids[row + 1:]

    expect_error(stub, grpc.StatusCode.NOT_FOUND,
                 f'session_ids[3]: session "{prefix}.999" is unknown', step,
                 session_ids=with_row(3, prefix + ".999"))
    expect_error(stub, grpc.StatusCode.NOT_FOUND,
                 f'session_ids[7]: session "{closed}" was closed', step,
                 session_ids=with_row(7, closed))
    expect_error(stub, grpc.StatusCode.INVALID_ARGUMENT,
                 f'session_ids[5]: session "{ids[2]}" repeats session_ids[2]', step,
                 session_ids=with_row(5, ids[2]))
    expect_error(stub, grpc.StatusCode.INVALID_ARGUMENT,
                 f'session_ids[4]: session "{other_model}" runs model "tiny-qwen2"',
                 step, session_ids=with_row(4, other_model))
    # None of them was left leased or advanced: the call below would be ABORTED, and
    # its answer would differ from the twins'.
    got = values(call(stub, step, session_ids=ids).hidden_states)
    want = values(call(stub, step, session_ids=twins).hidden_states)
    assert np.array_equal(got, want)
    lengths = call(stub, step, session_ids=ids).session_lengths
    assert list(lengths) == [7] * SESSIONS


def test_request_errors_name_their_field(whole):
    _, stub = whole
    d = hidden_size("tiny-llama")
    ids = open_sessions(stub, "tiny-llama", 2)
    two = np.ones((2, 1, d), np.float32)
    expect_error(stub, grpc.StatusCode.INVALID_ARGUMENT,
                 "session_ids: 2 sessions for hidden_states.shape [3,1,",
                 np.ones((3, 1, d), np.float32), session_ids=ids)
    expect_error(stub, grpc.StatusCode.INVALID_ARGUMENT,
                 "session_ids: give session_id (one session) or session_ids", two,
                 session_ids=ids, session_id=ids[0])
    expect_error(stub, grpc.StatusCode.INVALID_ARGUMENT, "position_offset: leave it empty",
                 two, session_ids=ids, position_offset=4)
    expect_error(stub, grpc.StatusCode.INVALID_ARGUMENT, "positions: leave it empty", two,
                 session_ids=ids, positions=[0, 1])
    expect_error(stub, grpc.StatusCode.INVALID_ARGUMENT, "session_ids[1]: empty", two,
                 session_ids=[ids[0], ""])
    expect_error(stub, grpc.StatusCode.INVALID_ARGUMENT, "sequence_lengths[1]: 2 must be",
                 two, session_ids=ids, sequence_lengths=[1, 2])
    expect_error(stub, grpc.StatusCode.INVALID_ARGUMENT,
                 'model: "tiny-qwen2" differs from session_ids[0]\'s session', two,
                 session_ids=ids, model="tiny-qwen2")
    expect_error(stub, grpc.StatusCode.INVALID_ARGUMENT,
                 "hidden_states.shape: last dimension", np.ones((2, 1, d + 1), np.float32),
                 session_ids=ids)
    short = stub.OpenSession(pb.OpenSessionRequest(model="tiny-llama",
                                                   max_length=1)).session_id
    expect_error(stub, grpc.StatusCode.OUT_OF_RANGE,
                 f'session_ids[1]: session "{short}" holds 0 tokens; 2 more would pass '
                 "its max_length 1", np.ones((2, 2, d), np.float32),
                 session_ids=[ids[0], short])
    # After every refusal both sessions are still at 0 tokens and free.
    assert list(call(stub, two, session_ids=ids).session_lengths) == [1, 1]


def test_metrics_count_each_sessions_step():
    process, channel, stub = started()
    try:
        ids = [stub.OpenSession(pb.OpenSessionRequest(num_layers=2)).session_id
               for _ in range(4)]
        rng = np.random.default_rng(25)
        call(stub, rng.standard_normal((4, 3, 512)).astype(np.float32), session_ids=ids,
             sequence_lengths=[3, 1, 2, 3])
        for _ in range(5):
            call(stub, rng.standard_normal((4, 1, 512)).astype(np.float32),
                 session_ids=ids)
        assert process.metric_sum("layerserve_session_tokens_total",
                                  phase="decode") == 4 * 5 + 1
        assert process.metric_sum("layerserve_session_tokens_total",
                                  phase="prefill") == 8
        assert process.metric_sum("layerserve_decode_step_duration_seconds_count") == 21
        assert process.metric_sum("layerserve_requests_total", method="BlockForward") == 6
    finally:
        stop(process, channel)
