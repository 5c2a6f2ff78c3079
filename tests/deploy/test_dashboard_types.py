"""deploy/grafana/layerserve-dashboard.json type-checks against @grafana/schema
(deploy/grafana/typecheck-dashboard.cjs) and covers what the dashboard promises:
QPS by method and code, p50/p99 latency, queue vs compute time, batch size, every
numeric-health metric; all queries on the metric names of tests/deploy/metric_names.py."""
import json
import os
import subprocess

import pytest

from conftest import DEPLOY_DIR
from metric_names import DESIGN_METRICS, referenced_metrics

GRAFANA = DEPLOY_DIR / "grafana"
DASHBOARD = GRAFANA / "layerserve-dashboard.json"


def typecheck(path, node_modules):
    return subprocess.run(["node", str(GRAFANA / "typecheck-dashboard.cjs"), str(path)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NODE_PATH": str(node_modules)})


def panels():
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def test_dashboard_type_checks(node_modules):
    result = typecheck(DASHBOARD, node_modules)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"valid: {len(json.loads(DASHBOARD.read_text())['panels'])} panels"


@pytest.mark.parametrize("mistake,message", [
    (('"legendFormat"', '"legendFromat"'), "'\"legendFromat\"' does not exist"),
    (('"displayMode": "table"', '"displayMode": "tabel"'), "not assignable"),
    (('"schemaVersion": 39', '"schemaVersion": "39"'), "not assignable"),
])
def test_type_check_rejects_mistakes(mistake, message, tmp_path, node_modules):
    text = DASHBOARD.read_text()
    assert mistake[0] in text
    bad = tmp_path / "dashboard.json"
    bad.write_text(text.replace(mistake[0], mistake[1], 1))
    result = typecheck(bad, node_modules)
    assert result.returncode == 1
    assert message in result.stderr, result.stderr


def test_panels_cover_the_brief_on_design_metric_names():
    exprs = [t["expr"] for p in panels() for t in p["targets"]]
    used = set().union(*(referenced_metrics(e) for e in exprs))
    assert used - {"up"} <= DESIGN_METRICS, used - DESIGN_METRICS
    # Every metric of DESIGN_METRICS (the first set) is on the dashboard (histograms through _bucket).
    design_families = {m for m in DESIGN_METRICS if not m.endswith(("_sum", "_count"))}
    assert design_families <= used, design_families - used
    joined = "\n".join(exprs)
    assert "sum by (method, code) (rate(layerserve_requests_total" in joined
    for phi in ("0.5", "0.99"):
        assert f"histogram_quantile({phi}, sum by (method, le) (rate(layerserve_request_duration_seconds_bucket" in joined
    # Unique ids and refIds; every panel on the templated data source.
    ids = [p["id"] for p in json.loads(DASHBOARD.read_text())["panels"]]
    assert len(ids) == len(set(ids))
    for p in panels():
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
