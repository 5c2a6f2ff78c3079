"""Pipeline across replicas that each serve a span of an 8-layer model (--layers):
three spans 0:3, 3:6 (two replicas) and 6:8 against one server with all 8 layers,
for 8-layer float32 copies of the llama, qwen2 and gpt2 golden checkpoints
(tests/testing/deep_checkpoint.py). Forward and session steps equal the one
server's bit for bit; a middle replica SIGKILLed after step 8 or a stage session
lost (NOT_FOUND) is re-prefilled elsewhere and the steps still match; Pipeline.step
(many sessions in one call per stage) equals each session's forward bit for bit, and
recovers a lost row or a killed replica; from_servers orders the spans and refuses
gaps and overlaps; OUT_OF_RANGE names the span."""
import os
import signal

import grpc
import numpy as np
import pytest

from checks import assert_close
from conftest import MODELS, stop_cleanly
from deep_checkpoint import write_deep_copy
from layerserve_client import (Client, LayerServeError, Pipeline, PipelineForwardResult,
                               PipelineSession, PipelineStepResult)
from server_process import ServerProcess

ARCHITECTURES = ["tiny-llama", "tiny-qwen2", "tiny-gpt2"]
SPANS = {"a": "0:3", "b1": "3:6", "b2": "3:6", "c": "6:8"}
PREFILL, STEPS = 5, 16


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    directory = tmp_path_factory.mktemp("deep-models")
    for name in ARCHITECTURES:
        write_deep_copy(os.path.join(MODELS, name), directory / name, layers=8,
                        max_positions=64)
    return directory


def start(repo, layers=None):
    args = [f"--model-repository={repo}", "--weight-dtype=float32"]
    if layers:
        args.append(f"--layers={layers}")
    return ServerProcess(*args)


@pytest.fixture(scope="module")
def servers(repo):
    """"full": all 8 layers; "a", "b1", "b2", "c": the spans."""
    processes = {"full": start(repo)}
    try:
        for name, layers in SPANS.items():
            processes[name] = start(repo, layers)
        yield processes
    finally:
        for process in processes.values():
            if process.proc.poll() is None:
                stop_cleanly(process)


def stages(servers, middle=("b1", "b2")):
    return [(servers["a"].target, 0, 3), ([servers[m].target for m in middle], 3, 3),
            (servers["c"].target, 6, 2)]


def hidden(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def hidden_size(target, model):
    with Client(target) as client:
        return client.get_model(model).hidden_size


@pytest.mark.parametrize("model", ARCHITECTURES)
def test_forward_equals_one_server_with_every_layer(servers, model):
    d = hidden_size(servers["full"].target, model)
    with Client(servers["full"].target) as full, \
            Pipeline(stages(servers), model=model, timeout=60) as pipeline:
        for x in (hidden((6, d), 1), hidden((2, 4, d), 2)):
            want = full.block_forward(x, model=model, num_layers=8)
            got = pipeline.forward(x)
            assert got.dtype == np.float32 and got.shape == x.shape
            assert np.array_equal(got, want), f"{model}: pipeline differs"
            assert len(pipeline.last_stage_seconds) == 3
            assert all(s > 0 for s in pipeline.last_stage_seconds)


def one_server_session(target, model, x):
    """Prefill x[:PREFILL], then one step per remaining token, on one server."""
    with Client(target) as client, \
            client.open_session(model=model, num_layers=8) as session:
        return [session.forward(x[:PREFILL]).hidden_states] + [
            session.forward(x[t:t + 1]).hidden_states for t in range(PREFILL, len(x))]


@pytest.mark.parametrize("model", ARCHITECTURES)
def test_session_prefill_and_steps_equal_one_server(servers, model):
    d = hidden_size(servers["full"].target, model)
    x = hidden((PREFILL + STEPS, d), 3)
    want = one_server_session(servers["full"].target, model, x)
    with Pipeline(stages(servers), model=model, timeout=60) as pipeline, \
            pipeline.open_session() as session:
        assert isinstance(session, PipelineSession)
        got = [session.forward(x[:PREFILL])]
        got += [session.forward(x[t:t + 1]) for t in range(PREFILL, len(x))]
    for step, (g, w) in enumerate(zip(got, want)):
        assert isinstance(g, PipelineForwardResult)
        assert np.array_equal(g.hidden_states, w), f"{model}: step {step}"
        assert len(g.stage_seconds) == 3 and all(s > 0 for s in g.stage_seconds)
    assert got[-1].length == PREFILL + STEPS
    assert got[-1].stage_targets == [servers["a"].target, servers["b1"].target,
                                     servers["c"].target]
    assert session.recoveries == 0


@pytest.mark.parametrize("model", ARCHITECTURES)
def test_middle_replica_killed_after_step_8_the_session_continues(repo, servers, model):
    doomed = start(repo, "3:6")
    try:
        d = hidden_size(servers["full"].target, model)
        x = hidden((PREFILL + STEPS, d), 4)
        want = one_server_session(servers["full"].target, model, x)
        with Pipeline(stages({**servers, "doomed": doomed}, middle=("doomed", "b2")),
                      model=model, timeout=60) as pipeline, \
                pipeline.open_session() as session:
            got = [session.forward(x[:PREFILL]).hidden_states]
            for step in range(1, STEPS + 1):
                if step == 9:
                    doomed.proc.send_signal(signal.SIGKILL)
                    doomed.proc.wait(timeout=30)
                t = PREFILL + step - 1
                result = session.forward(x[t:t + 1])
                got.append(result.hidden_states)
                assert result.stage_targets[1] == (
                    doomed.target if step < 9 else servers["b2"].target)
            assert session.recoveries == 1
        for step in range(9):  # The prefill and steps 1-8: the same replicas' bits.
            assert np.array_equal(got[step], want[step]), f"{model}: step {step}"
        # Steps 9-16 attend over keys and values the other replica rebuilt from one
        # prefill of the 13 cached inputs: the same numbers up to float32 rounding.
        for step in range(9, STEPS + 1):
            assert_close(got[step], want[step], 1e-5, f"{model}: step {step}")
    finally:
        doomed.stop(signal.SIGKILL)


def test_a_lost_stage_session_is_re_prefilled_on_the_same_replica(servers):
    """NOT_FOUND (evicted, expired, or a replica that restarted): with one replica
    of the stage the pipeline opens a new session there and re-prefills."""
    model = "tiny-llama"
    d = hidden_size(servers["full"].target, model)
    x = hidden((PREFILL + 3, d), 5)
    want = one_server_session(servers["full"].target, model, x)
    with Pipeline(stages(servers, middle=("b2",)), model=model) as pipeline, \
            pipeline.open_session() as session:
        got = [session.forward(x[:PREFILL]).hidden_states]
        with Client(servers["c"].target) as c:
            c.close_session(session.session_ids[2])  # The last stage's, as if evicted.
        got += [session.forward(x[t:t + 1]).hidden_states for t in range(PREFILL, len(x))]
        assert session.recoveries == 1
    for g, w in zip(got, want):
        assert_close(g, w, 1e-5, "after the re-prefill")


def test_from_servers_orders_the_spans_and_groups_replicas(servers):
    targets = [servers[n].target for n in ("c", "b1", "a", "b2")]
    with Pipeline.from_servers(targets, model="tiny-qwen2") as pipeline:
        assert pipeline.stages == [([servers["a"].target], 0, 3),
                                   ([servers["b1"].target, servers["b2"].target], 3, 3),
                                   ([servers["c"].target], 6, 2)]
        x = hidden((3, hidden_size(servers["a"].target, "tiny-qwen2")), 6)
        with Client(servers["full"].target) as full:
            assert np.array_equal(pipeline.forward(x),
                                  full.block_forward(x, model="tiny-qwen2", num_layers=8))


def test_from_servers_refuses_a_gap_an_overlap_and_a_short_cover(repo, servers):
    with pytest.raises(LayerServeError) as error:
        Pipeline.from_servers([servers["a"].target, servers["c"].target])
    assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "the spans leave a gap at layer 3" in error.value.details
    assert f"{servers['c'].target} serve layers 6..7" in error.value.details
    overlapping = start(repo, "2:6")
    try:
        with pytest.raises(LayerServeError) as error:
            Pipeline.from_servers([servers["a"].target, overlapping.target,
                                   servers["c"].target])
        assert "the spans leave a overlap at layer 2" in error.value.details
    finally:
        stop_cleanly(overlapping)
    with pytest.raises(LayerServeError) as error:
        Pipeline.from_servers([servers["a"].target, servers["b1"].target])
    assert "the spans end at layer 5; the model has 8 layers" in error.value.details


def test_stages_that_do_not_chain_are_refused():
    with pytest.raises(LayerServeError) as error:
        Pipeline([("127.0.0.1:1", 0, 3), ("127.0.0.1:2", 4, 4)])
    assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "stages[1]: starts at layer 4 but stages[0] ends before layer 3 (gap)" in \
        error.value.details
    with pytest.raises(LayerServeError) as error:
        Pipeline([("127.0.0.1:1", 0, 0)])
    assert "stages[0]: num_layers 0 must be >= 1" in error.value.details
    with pytest.raises(LayerServeError) as error:
        Pipeline([])
    assert "stages: empty" in error.value.details


def test_a_stage_outside_its_servers_span_is_out_of_range(servers):
    """A pipeline told the wrong span gets the server's OUT_OF_RANGE, span named."""
    with Pipeline([(servers["a"].target, 0, 4), (servers["b1"].target, 4, 2)],
                  model="tiny-llama") as pipeline:
        with pytest.raises(LayerServeError) as error:
            pipeline.forward(hidden((2, 48), 7))
    assert error.value.code == grpc.StatusCode.OUT_OF_RANGE
    assert error.value.details == (
        'layer_start, num_layers: layers 0..3 of model "tiny-llama" are outside this '
        "server's span, layers 0..2 (--layers=0:3)")


def test_model_info_reports_the_span(servers):
    with Client(servers["b1"].target) as client:
        info = client.get_model("tiny-gpt2")
    assert (info.num_layers, info.span_layer_start, info.span_num_layers) == (8, 3, 3)


def test_a_stage_whose_every_replica_is_gone_fails_naming_it(repo, servers):
    only = start(repo, "3:6")
    model = "tiny-llama"
    x = hidden((PREFILL + 1, hidden_size(servers["full"].target, model)), 9)
    with Pipeline(stages({**servers, "only": only}, middle=("only",)), model=model,
                  timeout=10) as pipeline, pipeline.open_session() as session:
        session.forward(x[:PREFILL])
        only.proc.send_signal(signal.SIGKILL)
        only.proc.wait(timeout=30)
        with pytest.raises(LayerServeError) as error:
            session.forward(x[PREFILL:])
    assert error.value.code == grpc.StatusCode.UNAVAILABLE
    assert error.value.details.startswith(
        f"layers 3..5 on {only.target}: every replica failed; last: ")


def test_from_servers_refuses_servers_of_different_models(servers):
    golden = ServerProcess(f"--model-repository={MODELS}", "--layers=0:3")
    try:
        with pytest.raises(LayerServeError) as error:
            Pipeline.from_servers([servers["a"].target, golden.target], model="tiny-llama")
        assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert error.value.details == (
            f"{golden.target}: model 'tiny-llama' has 3 layers, {servers['a'].target} "
            "says 8")
    finally:
        stop_cleanly(golden)


def step_calls(d, seed):
    """3 sessions: a ragged prefill, 4 one-token steps, a ragged 2-token step."""
    calls = [(hidden((3, PREFILL, d), seed), [PREFILL, 2, 4])]
    calls += [(hidden((3, 1, d), seed + 1 + i), [1, 1, 1]) for i in range(4)]
    calls.append((hidden((3, 2, d), seed + 5), [2, 1, 2]))
    return calls


def forwards(sessions, rows, lengths):
    """Each row's real tokens as its session's own forward, padded like a step."""
    out = np.zeros_like(rows)
    for b, session in enumerate(sessions):
        out[b, :lengths[b]] = session.forward(rows[b, :lengths[b]]).hidden_states
    return out


@pytest.mark.parametrize("model", ARCHITECTURES)
def test_step_of_many_sessions_equals_their_forwards(servers, model):
    d = hidden_size(servers["full"].target, model)
    with Pipeline(stages(servers), model=model, timeout=60) as pipeline:
        alone = [pipeline.open_session() for _ in range(3)]
        together = [pipeline.open_session() for _ in range(3)]
        for rows, lengths in step_calls(d, 20):
            want = forwards(alone, rows, lengths)
            got = pipeline.step(together, rows, sequence_lengths=lengths)
            assert isinstance(got, PipelineStepResult)
            assert np.array_equal(got.hidden_states, want), model
            assert got.lengths == [s.length for s in alone]
            assert [s.length for s in together] == got.lengths
            assert len(got.stage_seconds) == 3
            # One call per stage: every row on the stage's one replica in use.
            assert got.stage_targets == [[servers[n].target] * 3 for n in ("a", "b1", "c")]
        one = pipeline.step([together[1]], hidden((1, d), 30))  # [T, D]: one session
        assert one.hidden_states.shape == (1, d)
        assert one.lengths == [together[1].length] == [alone[1].length + 1]
        for session in alone + together:
            assert session.recoveries == 0
            session.close()


def test_step_recovers_the_session_a_row_names(servers):
    """NOT_FOUND naming session_ids[1] at the last stage: that session alone is
    re-opened and re-prefilled, and the step goes on."""
    model = "tiny-llama"
    d = hidden_size(servers["full"].target, model)
    calls = step_calls(d, 40)
    with Pipeline(stages(servers), model=model, timeout=60) as pipeline:
        alone = [pipeline.open_session() for _ in range(3)]
        together = [pipeline.open_session() for _ in range(3)]
        for i, (rows, lengths) in enumerate(calls):
            if i == 2:
                with Client(servers["c"].target) as c:  # As if evicted.
                    c.close_session(together[1].session_ids[2])
            want = forwards(alone, rows, lengths)
            got = pipeline.step(together, rows, sequence_lengths=lengths)
            if i < 2:
                assert np.array_equal(got.hidden_states, want)
            else:
                assert_close(got.hidden_states, want, 1e-5, f"call {i}")
            assert got.lengths == [s.length for s in alone]
        assert [s.recoveries for s in together] == [0, 1, 0]


def test_step_moves_every_session_of_a_killed_replica_together(repo, servers):
    doomed = start(repo, "3:6")
    try:
        model = "tiny-qwen2"
        d = hidden_size(servers["full"].target, model)
        calls = step_calls(d, 50)
        with Pipeline(stages(servers), model=model, timeout=60) as reference, \
                Pipeline(stages({**servers, "doomed": doomed}, middle=("doomed", "b2")),
                         model=model, timeout=60) as pipeline:
            alone = [reference.open_session() for _ in range(3)]
            together = [pipeline.open_session() for _ in range(3)]
            for i, (rows, lengths) in enumerate(calls):
                if i == 3:
                    doomed.proc.send_signal(signal.SIGKILL)
                    doomed.proc.wait(timeout=30)
                want = forwards(alone, rows, lengths)
                got = pipeline.step(together, rows, sequence_lengths=lengths)
                target = doomed.target if i < 3 else servers["b2"].target
                assert got.stage_targets[1] == [target] * 3
                if i < 3:
                    assert np.array_equal(got.hidden_states, want)
                else:
                    assert_close(got.hidden_states, want, 1e-5, f"call {i}")
            assert [s.recoveries for s in together] == [1, 1, 1]
    finally:
        doomed.stop(signal.SIGKILL)
