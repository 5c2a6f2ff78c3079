"""Reloading the model repository without a restart, through the real server: SIGHUP
(and --repository-poll-interval) rescans --model-repository; new models load,
removed ones unload once their calls finish, changed ones are replaced by their new
version; sessions of unchanged models survive, those of replaced ones get NOT_FOUND
saying the model was reloaded; a replacement that fails to load leaves the old
version serving and says why in ModelInfo.reload_error and a metric; calls keep
succeeding while it all happens. Every wait is on something the server shows (its
log line, ListModels, /metrics), never a guessed sleep."""
import os
import re
import shutil
import signal
import threading

import grpc
import numpy as np
import pytest

from grpc_std import health_pb2, health_pb2_grpc
from layerserve.v1 import layerserve_pb2 as pb
from random_llama import write_random_llama
from server_process import run_cli, started, stop, wait_for
from wire import array_tensor

HIDDEN = 64
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# Long enough for a loaded 2-core machine running a sanitizer build.
TIMEOUT = 120


def write_model(directory, seed, **shape):
    """A small Llama of random weights (`seed`) at `directory`, written elsewhere
    first and moved in file by file, weights before the config, as an operator
    would publish one: the server never reads a half-written file."""
    staging = f"{directory}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    dims = dict(hidden=HIDDEN, heads=4, kv_heads=2, ffn=128, layers=2)
    dims.update(shape)
    write_random_llama(staging, dtype="float32", seed=seed, **dims)
    os.makedirs(directory, exist_ok=True)
    for name in ("model.safetensors", "config.json"):
        os.replace(os.path.join(staging, name), os.path.join(directory, name))
    os.rmdir(staging)


def add_model(repo, name, seed):
    """A new model appears at once: written aside, its directory renamed in."""
    aside = repo.parent / f"{repo.name}-{name}"
    write_model(aside, seed)
    os.rename(aside, repo / name)


def request(model, tokens=3, seed=0, session=""):
    x = np.random.default_rng(seed).standard_normal((1, tokens, HIDDEN)).astype("<f4")
    return pb.BlockForwardRequest(model=model if not session else "",
                                  num_layers=0 if session else 2, session_id=session,
                                  hidden_states=array_tensor(x, "float32"))


def forward(stub, model, **kwargs):
    reply = stub.BlockForward(request(model, **kwargs), timeout=TIMEOUT)
    return np.frombuffer(reply.hidden_states.data, dtype="<f4")


def models(stub):
    return {m.name: m for m in stub.ListModels(pb.ListModelsRequest(), timeout=30).models}


def reloads(process, why="SIGHUP"):
    """The reload lines the server has logged so far."""
    return [line for line in process.lines if f"reload ({why})" in line]


def sighup_and_wait(process, why="SIGHUP"):
    """Sends SIGHUP and returns the reload's log line once the server wrote it."""
    before = len(reloads(process, why))
    process.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: len(reloads(process, why)) > before, timeout=TIMEOUT), \
        process.output()
    return reloads(process, why)[before]


def health_status(process, model):
    with grpc.insecure_channel(process.target) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=f"layerserve.v1.LayerService/{model}"),
            timeout=30).status


def reload_count(process, model, result):
    return process.metric_sum("layerserve_model_reloads_total", model=model,
                              result=result)


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    return path


def test_sighup_adds_replaces_and_removes_models(repo):
    write_model(repo / "keep", seed=1)
    write_model(repo / "change", seed=2)
    write_model(repo / "gone", seed=3)
    process, channel, stub = started(f"--model-repository={repo}")
    try:
        assert {n: m.version for n, m in models(stub).items()} == {
            "keep": 1, "change": 1, "gone": 1}
        # Every model's reload counters exist from the start, at 0.
        assert reload_count(process, "keep", "ok") == 0
        assert reload_count(process, "keep", "failed") == 0
        before = forward(stub, "change")
        kept = stub.OpenSession(pb.OpenSessionRequest(model="keep", num_layers=2))
        lost = stub.OpenSession(pb.OpenSessionRequest(model="change", num_layers=2))
        forward(stub, "", session=kept.session_id)
        forward(stub, "", session=lost.session_id)

        add_model(repo, "new", seed=4)
        write_model(repo / "change", seed=5)
        shutil.rmtree(repo / "gone")
        line = sighup_and_wait(process)
        assert re.search(r"reload \(SIGHUP\): added \[new\], replaced \[change\], "
                         r"removed \[gone\], failed \[\], unchanged 1", line), line

        listed = models(stub)
        assert {n: m.version for n, m in listed.items()} == {
            "keep": 1, "change": 2, "new": 1}
        assert all(m.state == pb.ModelInfo.READY and not m.reload_error
                   for m in listed.values())
        # The new version's numbers, the new model serves, the removed one is gone.
        assert not np.allclose(forward(stub, "change"), before)
        assert forward(stub, "new").shape == before.shape
        with pytest.raises(grpc.RpcError) as error:
            forward(stub, "gone")
        assert error.value.code() == grpc.StatusCode.NOT_FOUND

        # The session of the replaced model ends; the unchanged model's goes on.
        with pytest.raises(grpc.RpcError) as error:
            forward(stub, "", tokens=1, session=lost.session_id)
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        assert 'model "change" was reloaded' in error.value.details()
        assert "prefill again" in error.value.details()
        forward(stub, "", tokens=1, session=kept.session_id)

        assert health_status(process, "new") == SERVING
        assert health_status(process, "change") == SERVING
        with pytest.raises(grpc.RpcError) as error:
            health_status(process, "gone")
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        assert reload_count(process, "new", "ok") == 1
        assert reload_count(process, "change", "ok") == 1
        assert reload_count(process, "change", "failed") == 0
        text = process.metrics()
        assert 'layerserve_model_info{model="new"' in text
        assert 'layerserve_model_info{model="gone"' not in text

        # Nothing changed since: SIGHUP says so and changes nothing.
        assert "no change, unchanged 3" in sighup_and_wait(process)
    finally:
        stop(process, channel)


def test_removed_model_finishes_the_call_it_had_accepted(repo):
    # One worker, kept busy by a long call on a larger model, so that the call on
    # the model about to be removed waits in the queue across the reload.
    write_model(repo / "big", seed=1, hidden=512, heads=8, kv_heads=2, ffn=1408)
    write_model(repo / "gone", seed=2)
    process, channel, stub = started(f"--model-repository={repo}",
                                     "--compute-threads=1")
    try:
        expected = forward(stub, "gone")
        taken = process.metric_sum("layerserve_queue_duration_seconds_count",
                                   method="BlockForward")
        x = np.random.default_rng(0).standard_normal((4, 1024, 512)).astype("<f4")
        blocker = stub.BlockForward.future(pb.BlockForwardRequest(
            model="big", num_layers=2, hidden_states=array_tensor(x, "float32")),
            timeout=600)
        assert wait_for(lambda: process.metric_sum(
            "layerserve_queue_duration_seconds_count", method="BlockForward") > taken,
            timeout=TIMEOUT), "the blocker never started computing"
        queued = stub.BlockForward.future(request("gone"), timeout=600)
        assert wait_for(lambda: process.metric_value("layerserve_queue_depth") == 1,
                        timeout=TIMEOUT)

        shutil.rmtree(repo / "gone")
        line = sighup_and_wait(process)
        assert "removed [gone]" in line, line
        assert not queued.done(), "the call ran before the reload: nothing was tested"
        assert "gone" not in models(stub)
        blocker.result()
        # Accepted before the removal, it computes on the weights it was given.
        reply = queued.result()
        assert np.array_equal(np.frombuffer(reply.hidden_states.data, dtype="<f4"),
                              expected)
        with pytest.raises(grpc.RpcError) as error:
            forward(stub, "gone")
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        stop(process, channel)


def test_broken_replacement_keeps_the_old_version_serving(repo):
    write_model(repo / "m", seed=1)
    process, channel, stub = started(f"--model-repository={repo}")
    try:
        before = forward(stub, "m")
        with open(repo / "m" / "config.json", "w") as f:
            f.write("{ not json")
        line = sighup_and_wait(process)
        assert re.search(r"failed \[m: .*config\.json.* \(the old version serves\)\]",
                         line), line
        info = stub.GetModel(pb.GetModelRequest(name="m"), timeout=30)
        assert info.state == pb.ModelInfo.READY and info.error == ""
        assert info.version == 1
        assert "config.json" in info.reload_error
        assert models(stub)["m"].reload_error == info.reload_error
        listed = run_cli("--target", process.target, "list-models").stdout
        assert f"m: reload failed, version 1 serves: {info.reload_error}\n" in listed
        shown = run_cli("--target", process.target, "get-model", "--model", "m").stdout
        assert "version: 1\n" in shown and f"reload_error: {info.reload_error}\n" in shown
        assert reload_count(process, "m", "failed") == 1
        assert np.array_equal(forward(stub, "m"), before)
        assert health_status(process, "m") == SERVING

        # A new model that fails is FAILED, as at start, and never serving.
        (repo / "bad").mkdir()
        (repo / "bad" / "config.json").write_text("{}")
        sighup_and_wait(process)
        assert models(stub)["bad"].state == pb.ModelInfo.FAILED
        assert health_status(process, "bad") == NOT_SERVING
        assert reload_count(process, "bad", "failed") == 1

        # Fixed files load: the next version serves, the error is gone.
        write_model(repo / "m", seed=6)
        assert "replaced [m]" in sighup_and_wait(process)
        info = stub.GetModel(pb.GetModelRequest(name="m"), timeout=30)
        assert (info.version, info.reload_error) == (2, "")
        assert reload_count(process, "m", "ok") == 1
    finally:
        stop(process, channel)


def test_poll_interval_reloads_without_a_signal(repo):
    write_model(repo / "a", seed=1)
    process, channel, stub = started(f"--model-repository={repo}",
                                     "--repository-poll-interval=100ms")
    try:
        add_model(repo, "b", seed=2)
        assert wait_for(lambda: "b" in models(stub), timeout=TIMEOUT), process.output()
        assert wait_for(lambda: reloads(process, "poll"), timeout=TIMEOUT)
        assert "added [b]" in reloads(process, "poll")[0]
        forward(stub, "b")
    finally:
        stop(process, channel)


def test_calls_keep_succeeding_while_models_reload(repo):
    write_model(repo / "steady", seed=1)
    write_model(repo / "churn", seed=2)
    process, channel, stub = started(f"--model-repository={repo}")
    failures, done, stop_calls = [], [0], threading.Event()

    def call_loop():
        while not stop_calls.is_set():
            for model in ("steady", "churn"):
                try:
                    forward(stub, model)
                    done[0] += 1
                except grpc.RpcError as e:
                    failures.append(f"{model}: {e.code()} {e.details()}")
    callers = [threading.Thread(target=call_loop) for _ in range(2)]
    for caller in callers:
        caller.start()
    try:
        for version in range(2, 5):
            calls_before = done[0]
            write_model(repo / "churn", seed=version + 10)
            assert "replaced [churn]" in sighup_and_wait(process)
            assert models(stub)["churn"].version == version
            # Calls went on across that reload.
            assert wait_for(lambda: done[0] > calls_before + 4, timeout=TIMEOUT)
    finally:
        stop_calls.set()
        for caller in callers:
            caller.join()
        stop(process, channel)
    assert not failures, failures[:5]


def test_sighup_without_a_repository_changes_nothing():
    process, channel, stub = started()
    try:
        process.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: "nothing to reload" in process.output(), timeout=TIMEOUT)
        assert list(models(stub)) == ["demo"]
    finally:
        stop(process, channel)


def test_reload_keeps_the_layer_span(repo):
    write_model(repo / "m", seed=1, layers=4)
    process, channel, stub = started(f"--model-repository={repo}", "--layers=1:3")
    try:
        write_model(repo / "m", seed=2, layers=4)
        assert "replaced [m]" in sighup_and_wait(process)
        info = models(stub)["m"]
        assert (info.version, info.span_layer_start, info.span_num_layers) == (2, 1, 2)
    finally:
        stop(process, channel)
