"""docs/operations/runbook.md has one section per alert of deploy/prometheus/rules/
(a "## AlertName" heading with what it means, what to look at and what to do), and
no section for an alert that does not exist. The panels it names in quotes are
panels of the dashboard."""
import glob
import json
import os
import re

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RUNBOOK = os.path.join(ROOT, "docs", "operations", "runbook.md")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "layerserve-dashboard.json")


def alert_names():
    names = []
    for path in sorted(glob.glob(os.path.join(ROOT, "deploy", "prometheus", "rules", "*.yml"))):
        if path.endswith(".test.yml"):
            continue
        with open(path) as f:
            doc = yaml.safe_load(f)
        for group in doc.get("groups", []):
            names += [rule["alert"] for rule in group["rules"] if "alert" in rule]
    return names


def runbook_sections():
    """{heading: body} for every "## " section of the runbook."""
    with open(RUNBOOK) as f:
        text = f.read()
    parts = re.split(r"^## +(.+?)\s*$", text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_rules_have_alerts():
    assert len(alert_names()) >= 6


def test_every_alert_has_a_section():
    sections = runbook_sections()
    missing = [name for name in alert_names() if name not in sections]
    assert not missing, f"alerts without a section in runbook.md: {missing}"


def test_every_section_is_an_alert():
    extra = sorted(set(runbook_sections()) - set(alert_names()))
    assert not extra, f"runbook.md sections for alerts not in the rules: {extra}"


def test_each_section_says_means_look_do():
    for name, body in runbook_sections().items():
        for part in ("**Means:**", "**Look at:**", "**Do:**"):
            assert part in body, f"runbook.md, {name}: no {part}"


def test_quoted_panel_names_exist():
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    titles = {p["title"] for p in dashboard["panels"]}
    titles |= {p["title"] for row in dashboard["panels"] for p in row.get("panels", [])}
    with open(RUNBOOK) as f:
        text = f.read()
    # Panel names are the quoted phrases of the "Look at" paragraphs.
    quoted = set()
    for look in re.findall(r"\*\*Look at:\*\*(.*?)\n\n", text, flags=re.DOTALL):
        quoted |= {" ".join(q.split()) for q in re.findall(r'"([^"`]+)"', look)}
    unknown = sorted(quoted - titles)
    assert quoted and not unknown, f"runbook.md names panels the dashboard lacks: {unknown}"
