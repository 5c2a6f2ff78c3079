"""layerserve-bench end to end against the real server: the number of requests it
reports equals the server's own count (layerserve_requests_total in /metrics),
both as the bench reads it and as an outside scrape sees it; closed-loop sweeps,
open loop, errors by status code, and every request kind; decode with many
sessions per call, and decode threads that open new sessions after a refused
OpenSession."""
import json
import os
import re
import subprocess
import threading
from concurrent import futures

import grpc
import pytest

from server_process import CLI, ServerProcess

BENCH = os.environ.get("LAYERSERVE_BENCH",
                       os.path.join(os.path.dirname(CLI), "layerserve-bench"))


def run_bench(*args, timeout=120):
    return subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=timeout)


def requests_total(server, method):
    """layerserve_requests_total{method=...} by code, from an outside scrape."""
    counts = {}
    for m in re.finditer(r'^layerserve_requests_total\{code="([A-Z_]+)",method="%s"\} (\S+)$'
                         % method, server.metrics(), re.M):
        counts[m.group(1)] = float(m.group(2))
    return counts


def delta(after, before):
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def bench_json(server, *args):
    result = run_bench("--target", server.target, "--metrics-url", server.metrics_url,
                       "--json", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_request_count_agrees_with_the_server(server):
    before = requests_total(server, "Normalize")
    report = bench_json(server, "--method", "normalize", "--shape", "4,256",
                        "--concurrency", "4", "--requests", "300", "--warmup", "200ms")
    assert report["rpc"] == "Normalize"
    assert report["mode"] == "closed" and report["requests_per_level"] == 300
    [level] = report["levels"]
    assert level["concurrency"] == 4
    assert level["requests"] == 300 and level["ok"] == 300 and level["errors"] == {}
    # The bench's own scrapes bracket the measured requests only...
    assert level["server"]["requests_total"] == {"OK": 300}
    # ...and an outside scrape sees them plus the warm-up.
    assert level["warmup_requests"] > 0
    assert delta(requests_total(server, "Normalize"), before) == {
        "OK": 300 + level["warmup_requests"]}
    lat = level["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert level["throughput_rps"] == pytest.approx(300 / level["elapsed_s"])
    assert level["server"]["mean_batch_size"] >= 1


def test_concurrency_sweep_without_warmup(server):
    before = requests_total(server, "Activate")
    report = bench_json(server, "--method", "activate", "--activation", "swiglu",
                        "--shape", "2,64", "--wire-dtype", "bfloat16", "--concurrency",
                        "1,8", "--channels", "2", "--requests", "120", "--warmup", "0s")
    assert report["channels"] == 2
    assert [l["concurrency"] for l in report["levels"]] == [1, 8]
    for level in report["levels"]:
        assert level["requests"] == 120 and level["ok"] == 120
        assert level["warmup_requests"] == 0
        assert level["server"]["requests_total"] == {"OK": 120}
    assert delta(requests_total(server, "Activate"), before) == {"OK": 240}


def test_open_loop_constant_rate(server):
    before = requests_total(server, "PositionalEncode")
    report = bench_json(server, "--method", "rope", "--shape", "1,4,8,32", "--rate", "200",
                        "--distribution", "constant", "--requests", "40", "--warmup", "0s")
    [level] = report["levels"]
    assert level["mode"] == "open" and level["rate"] == 200
    assert level["requests"] == 40 and level["ok"] == 40
    # The last of 40 requests is scheduled at 39/200 s: the run cannot be shorter.
    assert level["elapsed_s"] >= 0.195
    assert level["throughput_rps"] < 220
    assert delta(requests_total(server, "PositionalEncode"), before) == {"OK": 40}


def test_errors_are_counted_by_code(server):
    before = requests_total(server, "GetModel")
    result = run_bench("--target", server.target, "--metrics-url", server.metrics_url,
                       "--json", "--method", "get-model", "--model", "no-such-model",
                       "--requests", "25", "--warmup", "0s", "--concurrency", "2")
    assert result.returncode == 2  # Some requests failed; the report is still printed.
    [level] = json.loads(result.stdout)["levels"]
    assert level["requests"] == 25 and level["ok"] == 0
    assert level["errors"] == {"NOT_FOUND": 25}
    assert "no-such-model" in level["error_messages"]["NOT_FOUND"]
    assert level["server"]["requests_total"] == {"NOT_FOUND": 25}
    assert delta(requests_total(server, "GetModel"), before) == {"NOT_FOUND": 25}


def test_block_forward_table_output(server):
    result = run_bench("--target", server.target, "--metrics-url", server.metrics_url,
                       "--method", "block-forward", "--batch", "2", "--tokens", "4",
                       "--requests", "10", "--warmup", "0s")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("layerserve-bench: BlockForward demo 1 layer(s), "
                               "hidden [2,4,512] FLOAT32")
    assert lines[1].split()[:3] == ["concurrency", "requests", "errors"]
    row = lines[2].split()
    assert row[:3] == ["1", "10", "0"]
    assert "concurrency 1: server requests_total OK 10" in lines


def test_bad_arguments_exit_1(server):
    result = run_bench("--target", server.target, "--rate", "10", "--concurrency", "2")
    assert result.returncode == 1
    assert "exclude each other" in result.stderr
    result = run_bench("--target", server.target, "--method", "rope", "--shape", "8,768")
    assert result.returncode == 1
    assert "needs a --shape of 4 dims" in result.stderr


def test_decode_keeps_a_session_per_thread(server):
    before = {phase: server.metric_sum("layerserve_session_tokens_total", phase=phase)
              for phase in ("prefill", "decode")}
    report = bench_json(server, "--method", "decode", "--tokens", "8", "--steps", "4",
                        "--concurrency", "1", "--requests", "20", "--warmup", "0s")
    [level] = report["levels"]
    assert level["ok"] == 20 and level["errors"] == {}
    # Open + prefill 8 tokens, 4 one-token steps, then a new session: 20 calls are
    # four sessions of 5 calls, 16 steps, whose latency is also summarized alone.
    assert level["step_latency_ms"]["count"] == 16
    assert level["step_latency_ms"]["max"] <= level["latency_ms"]["max"]
    after = {phase: server.metric_sum("layerserve_session_tokens_total", phase=phase)
             for phase in ("prefill", "decode")}
    assert after["prefill"] - before["prefill"] == 4 * 8
    assert after["decode"] - before["decode"] == 16


def test_help_and_version_exit_0():
    result = run_bench("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: layerserve-bench ")
    for flag in ("--concurrency", "--rate", "--metrics-url", "--version"):
        assert f"\n  {flag} " in result.stdout, flag
    result = run_bench("--version")
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"layerserve-bench \d+\.\d+\.\d+\n", result.stdout), result.stdout
    unknown = run_bench("--no-such-flag")
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("error: unknown flag --no-such-flag\n"), unknown.stderr


@pytest.mark.parametrize("sessions", [1, 2])
def test_decode_through_a_pipeline_keeps_a_session_per_stage(server, sessions):
    """--pipeline: the demo model split 0:1 and 1:4; every stage sees each session's
    prefill and steps (with --sessions-per-call, one call per stage and request),
    and --target is not needed."""
    stages = [ServerProcess("--layers=0:1"), ServerProcess("--layers=1:4")]
    try:
        result = run_bench("--pipeline", ",".join(s.target for s in reversed(stages)),
                           "--method", "decode", "--tokens", "8", "--steps", "4",
                           "--sessions-per-call", str(sessions),
                           "--concurrency", "1", "--requests", "20", "--warmup", "0s",
                           "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
        assert "through a 2-stage pipeline (4 layers)" in report["request"]
        assert report["target"] == ",".join(s.target for s in reversed(stages))
        [level] = report["levels"]
        assert level["ok"] == 20 and level["errors"] == {}
        for stage in stages:  # Four cycles of a prefill of 8 and 4 steps.
            assert stage.metric_sum("layerserve_session_tokens_total",
                                    phase="prefill") == 32 * sessions
            assert stage.metric_sum("layerserve_session_tokens_total",
                                    phase="decode") == 16 * sessions
            assert stage.metric_sum("layerserve_requests_total", method="BlockForward") == 20
    finally:
        for stage in stages:
            assert stage.stop() == 0, stage.output()
    result = run_bench("--target", server.target, "--method", "normalize",
                       "--pipeline", server.target)
    assert result.returncode == 1
    assert "--pipeline is for --method decode, not normalize" in result.stderr


def session_tokens(server):
    return {phase: server.metric_sum("layerserve_session_tokens_total", phase=phase)
            for phase in ("prefill", "decode")}


def test_decode_steps_many_sessions_in_one_call(server):
    before = session_tokens(server)
    report = bench_json(server, "--method", "decode", "--sessions-per-call", "3",
                        "--tokens", "8", "--steps", "4", "--concurrency", "1",
                        "--requests", "20", "--warmup", "0s")
    assert ", 3 sessions per call, prefill 8 then 4 one-token steps" in report["request"]
    [level] = report["levels"]
    assert level["ok"] == 20 and level["errors"] == {}
    # One BlockForward per request: four cycles of a prefill of 3 x 8 tokens and 4
    # steps of 3 tokens.
    assert level["server"]["requests_total"] == {"OK": 20}
    after = session_tokens(server)
    assert after["prefill"] - before["prefill"] == 4 * 3 * 8
    assert after["decode"] - before["decode"] == 16 * 3


class FailingOpenSession:
    """A gRPC proxy on 127.0.0.1 in front of `upstream`: it answers the OpenSession
    call numbered `fail` (1-based) with UNAVAILABLE and forwards every other call's
    bytes (and x-layerserve-session header) untouched."""

    def __init__(self, upstream, fail):
        self.fail = fail
        self.opens = 0
        self._lock = threading.Lock()
        self._upstream = grpc.insecure_channel(upstream)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        proxy = self

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):
                method = details.method
                return grpc.unary_unary_rpc_method_handler(
                    lambda request, context: proxy._forward(method, request, context))

        self._server.add_generic_rpc_handlers([Handler()])
        self.target = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def _forward(self, method, request, context):
        if method.endswith("/OpenSession"):
            with self._lock:
                self.opens += 1
                number = self.opens
            if number == self.fail:
                context.abort(grpc.StatusCode.UNAVAILABLE, "proxy: refusing this OpenSession")
        header = dict(context.invocation_metadata()).get("x-layerserve-session")
        try:
            return self._upstream.unary_unary(method)(
                request, timeout=context.time_remaining(),
                metadata=None if header is None else (("x-layerserve-session", header),))
        except grpc.RpcError as error:
            context.abort(error.code(), error.details())

    def stop(self):
        self._server.stop(grace=None)
        self._upstream.close()


@pytest.mark.parametrize("sessions", [1, 3])
def test_decode_opens_new_sessions_after_a_refused_open_session(server, sessions):
    """The last OpenSession of the second cycle fails: that request counts as
    UNAVAILABLE, and the thread's next request closes what it had opened and opens
    new sessions (rather than stepping a session it never got)."""
    proxy = FailingOpenSession(server.target, fail=2 * sessions)
    try:
        before = session_tokens(server)
        result = run_bench("--target", proxy.target, "--metrics-url", server.metrics_url,
                           "--json", "--method", "decode", "--sessions-per-call",
                           str(sessions), "--tokens", "8", "--steps", "4",
                           "--concurrency", "1", "--requests", "20", "--warmup", "0s")
        assert result.returncode == 2, result.stdout + result.stderr
        [level] = json.loads(result.stdout)["levels"]
        assert level["requests"] == 20 and level["ok"] == 19
        assert level["errors"] == {"UNAVAILABLE": 1}
        assert "refusing this OpenSession" in level["error_messages"]["UNAVAILABLE"]
        # Cycles of a prefill and 4 steps: requests 1-5, the refused 6, then 7-11,
        # 12-16 and 17-20 (3 steps). Every step went to a prefilled session.
        assert level["server"]["requests_total"] == {"OK": 19}
        after = session_tokens(server)
        assert after["prefill"] - before["prefill"] == 4 * sessions * 8
        assert after["decode"] - before["decode"] == (4 + 4 + 4 + 3) * sessions
        assert proxy.opens == 5 * sessions
    finally:
        proxy.stop()
