"""deploy/prometheus passes promtool: the config (with its file-discovery targets),
the alert rules, and the rules' unit tests (rules/layerserve-alerts.test.yml)."""
import shutil
import subprocess

import yaml

from conftest import DEPLOY_DIR
from metric_names import ADDED_METRICS, DESIGN_METRICS, referenced_metrics

PROMETHEUS = DEPLOY_DIR / "prometheus"
RULES = PROMETHEUS / "rules" / "layerserve-alerts.yml"


def promtool(*args, cwd=None):
    return subprocess.run(["promtool", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd)


def test_check_config_with_its_rules_and_targets(tmp_path):
    shutil.copytree(PROMETHEUS, tmp_path / "prometheus")
    result = promtool("check", "config", str(tmp_path / "prometheus" / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout


def test_check_rules_counts_every_alert():
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout


def test_rule_unit_tests_pass():
    result = promtool("test", "rules", "layerserve-alerts.test.yml", cwd=RULES.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rule_unit_tests_catch_a_wrong_threshold(tmp_path):
    """The unit tests pin the thresholds: 5% instead of 1% errors must fail them."""
    rules = RULES.read_text()
    assert "> 0.01" in rules
    (tmp_path / RULES.name).write_text(rules.replace("> 0.01", "> 0.05"))
    shutil.copy(RULES.parent / "layerserve-alerts.test.yml", tmp_path)
    result = promtool("test", "rules", "layerserve-alerts.test.yml", cwd=tmp_path)
    assert result.returncode == 1
    assert "LayerserveHighErrorRatio" in result.stderr


def test_alerts_use_only_the_servers_metric_names():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    names = set()
    for rule in groups[0]["rules"]:
        names |= referenced_metrics(rule["expr"])
    known = DESIGN_METRICS | ADDED_METRICS
    assert names - {"up"} <= known, names - known
    assert {a["alert"] for a in groups[0]["rules"]} == {
        "LayerserveTargetDown", "LayerserveHighLatencyP99", "LayerserveHighErrorRatio",
        "LayerserveNonFiniteOutput", "LayerserveQueueNearFull", "LayerserveModelReloadFailed",
        "LayerserveSessionEvictions"}


def _make_prometheusrule():
    import sys
    sys.path.insert(0, str(PROMETHEUS))
    import make_prometheusrule
    return make_prometheusrule


def test_the_kubernetes_prometheusrule_is_the_rules_file(tmp_path):
    """deploy/k8s/base/prometheusrule.yaml is make_prometheusrule.py's output, its
    groups are the rules file's, and promtool accepts them as a rules file."""
    committed = (DEPLOY_DIR / "k8s" / "base" / "prometheusrule.yaml").read_text()
    assert committed == _make_prometheusrule().render(RULES.read_text()), \
        "regenerate: deploy/prometheus/make_prometheusrule.py > deploy/k8s/base/prometheusrule.yaml"
    rule = yaml.safe_load(committed)
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    unwrapped = tmp_path / "rules.yml"
    unwrapped.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    result = promtool("check", "rules", str(unwrapped))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout


def test_a_changed_rule_changes_the_prometheusrule():
    text = RULES.read_text()
    assert "for: 2m" in text
    changed = _make_prometheusrule().render(text.replace("for: 2m", "for: 3m", 1))
    assert changed != (DEPLOY_DIR / "k8s" / "base" / "prometheusrule.yaml").read_text()
