"""Client.open_session and Session: prefill then one-token steps equal one
block_forward over the whole sequence (a tiny Llama checkpoint, float32 weights),
positions continue from the cache, the context manager closes the session, the
server's session errors come through, and every session call carries the
x-layerserve-session header (seen by a proxy) while forward steps are never
retried. Client.step (many sessions in one call): bit for bit each session's own
forward, ragged rows, errors naming the row with no session advanced, the first
session's header, sent once."""
import grpc
import numpy as np
import pytest

from checks import assert_close
from layerserve_client import (Client, LayerServeError, Session, SessionForwardResult,
                               StepResult)
from proxy import FlakyProxy

MODEL = "tiny-llama"


def hidden(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_prefill_then_steps_equal_one_forward_pass(golden_client):
    info = golden_client.get_model(MODEL)
    x = hidden((7, info.hidden_size), 61)
    whole = golden_client.block_forward(x, model=MODEL, num_layers=info.num_layers)
    with golden_client.open_session(model=MODEL, num_layers=info.num_layers) as session:
        assert isinstance(session, Session) and session.ttl_ms == 300_000
        prefill = session.forward(x[:4])
        assert isinstance(prefill, SessionForwardResult)
        assert prefill.length == 4 and prefill.hidden_states.shape == (4, info.hidden_size)
        got = [prefill.hidden_states]
        for t in range(4, 7):
            step = session.forward(x[t:t + 1])
            assert step.length == t + 1 == session.length
            got.append(step.hidden_states)
    # Float32 weights: the same sums in another order (attention over 1 vs 7 keys).
    assert_close(np.concatenate(got), whole, 1e-4, "prefill + steps vs one pass")
    assert session.closed


def test_positions_continue_from_the_cache(golden_client):
    d = golden_client.get_model(MODEL).hidden_size
    x = hidden((3, d), 62)
    with golden_client.open_session(model=MODEL) as implicit, \
            golden_client.open_session(model=MODEL) as explicit:
        implicit.forward(x[:2])
        explicit.forward(x[:2])
        a = implicit.forward(x[2:])                      # continues at position 2
        b = explicit.forward(x[2:], position_offset=2)   # says so
        assert np.array_equal(a.hidden_states, b.hidden_states)
    with golden_client.open_session(model=MODEL) as moved:
        moved.forward(x[:2])
        c = moved.forward(x[2:], positions=[9])
    assert not np.allclose(c.hidden_states, a.hidden_states, atol=1e-4)


def test_closed_session_and_errors(golden_client):
    d = golden_client.get_model(MODEL).hidden_size
    with golden_client.open_session(model=MODEL, max_length=3) as session:
        assert session.forward(hidden((2, d), 63)).length == 2
        with pytest.raises(LayerServeError) as error:
            session.forward(hidden((2, d), 64))
        assert error.value.code == grpc.StatusCode.OUT_OF_RANGE
        assert error.value.details == (f'hidden_states: session "{session.id}" holds 2 '
                                       "tokens; 2 more would pass its max_length 3")
        assert error.value.attempts == 1
    with pytest.raises(LayerServeError) as error:
        session.forward(hidden((1, d), 65))
    assert error.value.code == grpc.StatusCode.NOT_FOUND
    assert error.value.details == (f'session_id: session "{session.id}" was closed; '
                                   "open a new session and prefill again")
    with pytest.raises(LayerServeError) as error:
        golden_client.close_session(session.id)
    assert error.value.code == grpc.StatusCode.NOT_FOUND

    # Closed by id under the with-block: leaving it does not raise.
    with golden_client.open_session(model=MODEL) as session:
        golden_client.close_session(session.id)
    # An error inside the block is the one that comes out.
    with pytest.raises(ZeroDivisionError):
        with golden_client.open_session(model=MODEL) as session:
            1 / 0
    with pytest.raises(LayerServeError) as error:
        session.forward(hidden((1, d), 66))
    assert "was closed" in error.value.details

    with pytest.raises(LayerServeError) as error:
        golden_client.open_session(model=MODEL, layer_start=3)
    assert error.value.code == grpc.StatusCode.OUT_OF_RANGE


def test_session_calls_carry_the_header_and_steps_are_not_retried(server):
    proxy = FlakyProxy(server.target)
    try:
        with Client(proxy.target, timeout=30) as client:
            session = client.open_session(num_layers=2)
            x = hidden((3, 512), 67)
            first = session.forward(x[:2])
            assert first.length == 2
            # The next call fails at the proxy with UNAVAILABLE: a session step is
            # sent once (it might have appended already), so the error comes back.
            proxy.fail_first = sum(proxy.calls.values()) + 1
            with pytest.raises(LayerServeError) as error:
                session.forward(x[2:])
            assert error.value.code == grpc.StatusCode.UNAVAILABLE
            assert error.value.attempts == 1
            last = session.forward(x[2:])
            assert last.length == 3  # Nothing was appended by the failed call.
            plain = client.block_forward(x, num_layers=2)
            session.close()
        assert proxy.sessions == [
            ("OpenSession", None), ("BlockForward", session.id),
            ("BlockForward", session.id), ("BlockForward", session.id),
            ("BlockForward", None), ("CloseSession", session.id)]
        # The session's three tokens went through the same blocks as one pass.
        got = np.concatenate([first.hidden_states, last.hidden_states])
        assert_close(got, plain, 1e-4, "session through the proxy vs one pass")
    finally:
        proxy.stop()


def separate_steps(client, sessions, calls):
    """Each call's rows sent as each session's own forward of its real tokens: the
    outputs padded like a multi-session answer, and the lengths."""
    results = []
    for rows, lengths in calls:
        out = np.zeros_like(rows)
        for b, session in enumerate(sessions):
            out[b, :lengths[b]] = session.forward(rows[b, :lengths[b]]).hidden_states
        results.append((out, [s.length for s in sessions]))
    return results


def ragged_calls(d, seed):
    """A ragged prefill, three one-token steps and a ragged two-token step, for 3
    sessions."""
    calls = [(hidden((3, 5, d), seed), [5, 2, 4])]
    calls += [(hidden((3, 1, d), seed + 1 + i), [1, 1, 1]) for i in range(3)]
    calls.append((hidden((3, 2, d), seed + 4), [2, 1, 2]))
    return calls


def test_step_equals_each_sessions_forward_bit_for_bit(golden_client):
    d = golden_client.get_model(MODEL).hidden_size
    calls = ragged_calls(d, 70)
    alone = [golden_client.open_session(model=MODEL) for _ in range(3)]
    together = [golden_client.open_session(model=MODEL) for _ in range(3)]
    try:
        want = separate_steps(golden_client, alone, calls)
        for (rows, lengths), (want_out, want_lengths) in zip(calls, want):
            # Sessions or their ids, mixed: the same call.
            got = golden_client.step([together[0], together[1].id, together[2]], rows,
                                     sequence_lengths=lengths)
            assert isinstance(got, StepResult)
            assert got.hidden_states.shape == rows.shape
            assert np.array_equal(got.hidden_states, want_out)
            assert got.lengths == want_lengths
            # Session objects follow; an id cannot.
            assert together[0].length == want_lengths[0]
            assert together[2].length == want_lengths[2]
        assert together[1].length == 0
        # Without sequence_lengths every row is whole; [T, D] is one session's row.
        x = hidden((3, 1, d), 80)
        got = golden_client.step(together, x)
        assert got.lengths == [n + 1 for n in want[-1][1]]
        one = golden_client.step([together[0]], x[0])
        assert one.hidden_states.shape == x[0].shape and one.lengths == [got.lengths[0] + 1]
    finally:
        for session in alone + together:
            session.close()


def test_step_errors_name_the_row_and_advance_no_session(golden_client):
    d = golden_client.get_model(MODEL).hidden_size
    with golden_client.open_session(model=MODEL) as a, \
            golden_client.open_session(model=MODEL, max_length=2) as short:
        closed = golden_client.open_session(model=MODEL)
        closed.close()
        assert golden_client.step([a, short], hidden((2, 1, d), 81)).lengths == [1, 1]
        with pytest.raises(LayerServeError) as error:
            golden_client.step([a, closed, short], hidden((3, 1, d), 82))
        assert error.value.code == grpc.StatusCode.NOT_FOUND
        assert error.value.details.startswith(
            f'session_ids[1]: session "{closed.id}" was closed'), error.value.details
        assert error.value.attempts == 1
        with pytest.raises(LayerServeError) as error:
            golden_client.step([a, short], hidden((2, 2, d), 83))
        assert error.value.code == grpc.StatusCode.OUT_OF_RANGE
        assert error.value.details.startswith(
            f'session_ids[1]: session "{short.id}" holds 1 tokens; 2 more would pass '
            "its max_length 2"), error.value.details
        with pytest.raises(LayerServeError) as error:
            golden_client.step([a, a], hidden((2, 1, d), 84))
        assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert error.value.details.startswith("session_ids[1]: "), error.value.details
        # None of the failed calls advanced a session.
        assert (a.length, short.length) == (1, 1)
        assert golden_client.step([a, short], hidden((2, 1, d), 85)).lengths == [2, 2]
    for sessions, message in (([], "sessions: empty"),
                              ([a, 3], "sessions[1]: a Session or a session id, not int")):
        with pytest.raises(LayerServeError) as error:
            golden_client.step(sessions, hidden((2, 1, d), 86))
        assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert error.value.details.startswith(message), error.value.details
        assert error.value.attempts == 0


def test_step_carries_the_header_and_is_not_retried(server):
    proxy = FlakyProxy(server.target)
    try:
        with Client(proxy.target, timeout=30) as client:
            a, b = client.open_session(num_layers=2), client.open_session(num_layers=2)
            x = hidden((2, 3, 512), 87)
            assert client.step([a, b], x, sequence_lengths=[3, 2]).lengths == [3, 2]
            # The next call fails at the proxy with UNAVAILABLE: sent once, as the
            # answer of a call that got through may have been lost after appending.
            proxy.fail_first = sum(proxy.calls.values()) + 1
            with pytest.raises(LayerServeError) as error:
                client.step([a, b], x[:, :1])
            assert error.value.code == grpc.StatusCode.UNAVAILABLE
            assert error.value.attempts == 1
            assert client.step([a, b], x[:, :1]).lengths == [4, 3]
            a.close()
            b.close()
        # The sessions live on one replica: the first one's id routes the call.
        assert proxy.sessions[2:] == [("BlockForward", a.id)] * 3 + [
            ("CloseSession", a.id), ("CloseSession", b.id)]
    finally:
        proxy.stop()
