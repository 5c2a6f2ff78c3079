"""A real Prometheus (Debian's binary) on loopback, with deploy/prometheus's config
and alert rules, scrapes a running layerserve while the test sends traffic (LayerNorm
calls, good and bad, a few BlockForward calls, and a KV-cache session's prefill and
decode steps). Its HTTP API must then report
exactly the calls made, a latency quantile through histogram_quantile, healthy rules,
and data for every Grafana panel's query (deploy/grafana) and every alert rule's
expression: at least one series with a value other than NaN. A query that errors
fails, and so does one that returns nothing, which a dashboard shows as an empty
panel and an alert as "all is well"."""
import json
import math
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml

import wire
from checked_normalize import checked_normalize
from conftest import DEPLOY_DIR
from layerserve.v1 import layerserve_pb2 as pb
from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
from metric_names import DESIGN_METRICS, referenced_metrics
from server_process import ServerProcess, wait_for

OK_CALLS = 40
BAD_CALLS = 5
BLOCK_CALLS = 4
DECODE_STEPS = 3  # one-token steps of a session, after a prefill of PREFILL_TOKENS
PREFILL_TOKENS = 3
# BlockForward RPCs in all: the plain ones, the session's prefill and its steps.
BLOCK_FORWARD_RPCS = BLOCK_CALLS + 1 + DECODE_STEPS
_LISTENING = re.compile(r'msg="Listening on" address=(\S+)')


class Prometheus:
    """deploy/prometheus/ run from a copy whose scrape interval is 1 s and whose
    file-discovery target is `metrics_target`; the OS picks the web port."""

    def __init__(self, tmp_path, metrics_target):
        root = tmp_path / "prometheus"
        shutil.copytree(DEPLOY_DIR / "prometheus", root)
        config = yaml.safe_load((root / "prometheus.yml").read_text())
        config["global"]["scrape_interval"] = "1s"
        config["global"]["evaluation_interval"] = "1s"
        (root / "prometheus.yml").write_text(yaml.safe_dump(config))
        for old in (root / "targets").glob("*.json"):
            old.unlink()
        (root / "targets" / "ci.json").write_text(json.dumps(
            [{"targets": [metrics_target], "labels": {"deployment": "ci"}}]))
        self.log = tmp_path / "prometheus.log"
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={root / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}", "--web.listen-address=127.0.0.1:0",
             "--log.level=info"],
            stdout=subprocess.DEVNULL, stderr=self.log.open("w"), cwd=root)
        assert wait_for(lambda: _LISTENING.search(self.log.read_text()), timeout=30), \
            self.log.read_text()
        self.url = "http://" + _LISTENING.search(self.log.read_text()).group(1)
        # It listens before its storage is open, and answers queries 503 "Service
        # Unavailable" (not JSON) until then: wait for /-/ready.
        assert wait_for(self.ready, timeout=60), self.log.read_text()

    def ready(self):
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=10) as response:
                return response.status == 200
        except urllib.error.URLError:  # HTTPError (503 while starting) included.
            return False

    def api(self, path, **params):
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:  # 400/422 for bad queries: keep the body
            return json.load(e)

    def query(self, expr):
        reply = self.api("query", query=expr)
        assert reply["status"] == "success", (expr, reply)
        return reply["data"]["result"]

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def scraped():
    """A server that has answered OK_CALLS good and BAD_CALLS bad LayerNorm calls
    and BLOCK_CALLS BlockForward calls, a session's prefill and DECODE_STEPS decode
    steps (BLOCK_FORWARD_RPCS BlockForward RPCs in all), and a Prometheus that has scraped it after
    the last one. Yields (prometheus, server, slowest client-side LayerNorm latency
    in seconds)."""
    server = ServerProcess()
    tmp_path = Path(os.environ.get("TMPDIR", "/tmp"))
    workdir = Path(subprocess.check_output(["mktemp", "-d", str(tmp_path / "prom.XXXXXX")],
                                           text=True).strip())
    prometheus = Prometheus(workdir, server.metrics_url.split("/")[2])
    rng = np.random.default_rng(3)
    slowest = 0.0

    def scraped_totals(normalize, block_forward):
        expr = 'sum by (method) (layerserve_requests_total{method=~"Normalize|BlockForward"})'
        want = {"Normalize": normalize, "BlockForward": block_forward}
        return wait_for(lambda: {r["metric"]["method"]: float(r["value"][1])
                                 for r in prometheus.query(expr)} == want, timeout=30)

    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.LayerServiceStub(channel)
        hidden = stub.GetModel(pb.GetModelRequest(), timeout=10).hidden_size
        block = pb.BlockForwardRequest(hidden_states=wire.array_tensor(
            rng.standard_normal((1, 4, hidden)), "float32"))

        def block_forward():
            reply = stub.BlockForward(block, timeout=30)
            assert np.isfinite(wire.values(reply.hidden_states)).all()

        session_id = stub.OpenSession(pb.OpenSessionRequest(), timeout=30).session_id

        def session_forward(tokens):
            reply = stub.BlockForward(pb.BlockForwardRequest(
                hidden_states=wire.array_tensor(rng.standard_normal((1, tokens, hidden)),
                                                "float32"),
                session_id=session_id), timeout=30)
            assert np.isfinite(wire.values(reply.hidden_states)).all()

        # Histogram series appear with their first observation; rate() needs a
        # scrape of them before the traffic it measures (the decode-step histogram
        # too: a prefill and one step before the first scrape).
        checked_normalize(stub, rng)
        block_forward()
        session_forward(PREFILL_TOKENS)
        session_forward(1)
        assert scraped_totals(1, 3)
        for _ in range(OK_CALLS - 1):
            start = time.monotonic()
            checked_normalize(stub, rng)
            slowest = max(slowest, time.monotonic() - start)
        for _ in range(BLOCK_CALLS - 1):
            block_forward()
        for _ in range(DECODE_STEPS - 1):
            session_forward(1)
        for _ in range(BAD_CALLS):
            # 3x5 floats need 60 bytes, not 56: INVALID_ARGUMENT, never computed.
            bad = pb.Tensor(shape=[3, 5], dtype=pb.FLOAT32, data=b"\0" * 56)
            with pytest.raises(grpc.RpcError) as error:
                stub.Normalize(pb.NormalizeRequest(kind=pb.LAYER_NORM, input=bad), timeout=10)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # Scrapes every second; wait for one that has seen every call.
    assert scraped_totals(OK_CALLS + BAD_CALLS, BLOCK_FORWARD_RPCS)
    yield prometheus, server, slowest
    assert prometheus.stop() == 0, prometheus.log.read_text()[-2000:]
    assert server.stop() == 0, server.output()
    shutil.rmtree(workdir)


def test_counts_every_call_by_method_and_code(scraped):
    prometheus, _, _ = scraped
    result = prometheus.query('layerserve_requests_total{method="Normalize"}')
    by_code = {r["metric"]["code"]: float(r["value"][1]) for r in result}
    assert {c: n for c, n in by_code.items() if n} == {"OK": OK_CALLS,
                                                       "INVALID_ARGUMENT": BAD_CALLS}
    # Every code the server answers with has its series from the start, at 0 until
    # used: the error-ratio alert and panel select these.
    assert {"UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", "CANCELLED",
            "NOT_FOUND", "OUT_OF_RANGE"} <= set(by_code), by_code
    # So has every method's, called or not: LayerService's and the Open Inference
    # Protocol's that the server serves.
    methods = {r["metric"]["method"] for r in prometheus.query(
        'layerserve_requests_total{code="OK"}')}
    served_oip = {"ServerLive", "ServerReady", "ModelReady", "ServerMetadata",
                  "ModelMetadata", "ModelConfig", "ModelInfer", "ModelStreamInfer"}
    assert methods == set(
        pb.DESCRIPTOR.services_by_name["LayerService"].methods_by_name) | served_oip
    assert {r["metric"]["job"] for r in result} == {"layerserve"}
    assert {r["metric"]["deployment"] for r in result} == {"ci"}  # from the file SD labels
    up = prometheus.query('up{job="layerserve"}')
    assert [float(r["value"][1]) for r in up] == [1.0]


def test_latency_quantile_from_the_histogram(scraped):
    prometheus, _, slowest = scraped
    count = prometheus.query('sum(layerserve_request_duration_seconds_count{method="Normalize"})')
    assert float(count[0]["value"][1]) == OK_CALLS + BAD_CALLS
    for phi in (0.5, 0.99):
        result = prometheus.query(
            f'histogram_quantile({phi}, sum by (le) (rate('
            f'layerserve_request_duration_seconds_bucket{{method="Normalize"}}[1m])))')
        value = float(result[0]["value"][1])
        # Server time is part of the client's; interpolation within a bucket can
        # overshoot up to that bucket's upper bound (buckets at most 2.5x apart).
        assert 0 < value <= 2.5 * slowest, (phi, value, slowest)


def test_alert_rules_load_and_evaluate_without_errors(scraped):
    prometheus, _, _ = scraped
    groups = prometheus.api("rules")["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == 7
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    firing = [a for a in prometheus.api("alerts")["data"]["alerts"] if a["state"] == "firing"]
    # A healthy server with 5 client errors out of 45 calls pages nobody.
    assert firing == []


def _dashboard_queries():
    dashboard = json.loads((DEPLOY_DIR / "grafana" / "layerserve-dashboard.json").read_text())
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            queries.append((panel["title"], target["refId"], target["expr"]))
    variable = dashboard["templating"]["list"][1]["query"]["query"]
    return queries, variable


def _as_grafana_would(expr):
    """Grafana's template variables as it substitutes them: the Replica variable's
    "All" value and a rate interval of 4 scrape intervals."""
    return expr.replace("$__rate_interval", "1m").replace("$instance", ".*")


def _has_data(result):
    """Whether a query's result holds a value to show: a series, not NaN (a quantile
    or ratio over no events, which Grafana draws as nothing)."""
    return any(not math.isnan(float(r["value"][1])) for r in result)


def test_every_dashboard_query_returns_data(scraped):
    prometheus, _, _ = scraped
    queries, variable = _dashboard_queries()
    # The Replica variable lists the scraped replica.
    label_values = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable)
    replicas = prometheus.api(f"label/{label_values.group(2)}/values",
                              **{"match[]": label_values.group(1)})["data"]
    assert len(replicas) == 1

    empty = []
    for title, ref, expr in queries:
        names = referenced_metrics(expr)
        assert names - {"up"} <= DESIGN_METRICS, (title, names - DESIGN_METRICS)
        result = prometheus.query(_as_grafana_would(expr))  # fails on a query error
        if not _has_data(result):
            empty.append(f"{title} [{ref}]: {expr} -> {result}")
    assert not empty, "panel queries without data:\n" + "\n".join(empty)


# A comparison with a number that filters an alert's value: "> 0.5", "== 0",
# "> 0.8 * 1024" (before a closing parenthesis, a set operator or the end).
_THRESHOLD = re.compile(r"\s*(?:==|!=|>=|<=|>|<)\s*[0-9.]+(?:\s*[*/]\s*[0-9.]+)*"
                        r"(?=\s*(?:\)|$|\b(?:or|and|unless)\b))")
_COMPARISON = re.compile(r"(?:==|!=|>=|<=|>|<)\s*[0-9.]")


def test_every_alert_expression_returns_data(scraped):
    """Each alert's expression without its thresholds (what the alert compares) has
    a value now: a silent alert is then a healthy server, not a missing series."""
    prometheus, _, _ = scraped
    rules = [r for g in prometheus.api("rules")["data"]["groups"] for r in g["rules"]
             if r["type"] == "alerting"]
    assert len(rules) == 7
    empty = []
    for rule in rules:
        expr = _THRESHOLD.sub("", rule["query"].strip())
        assert expr != rule["query"].strip(), rule["query"]  # every alert has a threshold
        assert not _COMPARISON.search(expr), expr
        result = prometheus.query(expr)
        if not _has_data(result):
            empty.append(f"{rule['name']}: {expr} -> {result}")
    assert not empty, "alert expressions without data:\n" + "\n".join(empty)


def test_a_nan_output_fires_the_nonfinite_alert(scraped):
    """Last in this module (the alert stays firing for 5 minutes): a LayerNorm row
    holding a NaN comes back all NaN, and the real rule fires on the real counter."""
    prometheus, server, _ = scraped
    x = np.ones((2, 8), np.float32)
    x[0, 3] = np.nan
    with grpc.insecure_channel(server.target) as channel:
        reply = pb_grpc.LayerServiceStub(channel).Normalize(
            pb.NormalizeRequest(kind=pb.LAYER_NORM, input=wire.array_tensor(x, "float32")),
            timeout=10)
    got = wire.values(reply.output).reshape(2, 8)
    assert np.isnan(got[0]).all()
    assert np.array_equal(got[1], np.zeros(8))  # a constant row normalizes to 0

    def firing():
        return [a for a in prometheus.api("alerts")["data"]["alerts"] if a["state"] == "firing"]

    assert wait_for(firing, timeout=30), prometheus.api("alerts")
    [alert] = firing()
    assert alert["labels"] == {"alertname": "LayerserveNonFiniteOutput", "method": "Normalize",
                               "kind": "nan", "severity": "page"}
    assert alert["annotations"]["description"].startswith("8 non-finite (nan) output values")
