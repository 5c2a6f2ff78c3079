"""deploy/compose.yaml passes the Compose Specification schema
(deploy/validate-compose.cjs; no Docker or registry here to run it) and is wired to
the files CI tests: nginx's upstreams and Prometheus's targets are its replicas,
every mounted file exists, and stop_grace_period exceeds --shutdown-grace."""
import json
import os
import re
import subprocess

import yaml

from conftest import DEPLOY_DIR

COMPOSE = DEPLOY_DIR / "compose.yaml"


def validate(path, node_modules):
    return subprocess.run(["node", str(DEPLOY_DIR / "validate-compose.cjs"), str(path)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "NODE_PATH": str(node_modules)})


def test_compose_file_passes_the_schema(node_modules, tmp_path):
    result = validate(COMPOSE, node_modules)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["valid:", "layerserve-1", "layerserve-2", "layerserve-3",
                                     "nginx", "prometheus", "grafana"]
    # A misspelt key fails it.
    bad = tmp_path / "compose.yaml"
    bad.write_text(COMPOSE.read_text().replace("stop_grace_period", "stop_grace_perod"))
    result = validate(bad, node_modules)
    assert result.returncode == 1
    assert "stop_grace_perod" in result.stderr


def test_compose_is_wired_to_the_tested_configs():
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    replicas = sorted(s for s in services if s.startswith("layerserve-"))
    assert replicas == ["layerserve-1", "layerserve-2", "layerserve-3"]

    nginx_conf = (DEPLOY_DIR / "nginx" / "nginx.conf").read_text()
    # Each replica is in the round-robin pool and in its own session upstream.
    assert re.findall(r"server (layerserve-\d):50051 max_fails", nginx_conf) == replicas
    assert sorted(set(re.findall(r"server (layerserve-\d):50051", nginx_conf))) == replicas
    targets = json.loads((DEPLOY_DIR / "prometheus" / "targets" / "compose.json").read_text())
    assert targets[0]["targets"] == [f"{r}:9464" for r in replicas]

    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert (DEPLOY_DIR / source).exists(), (name, source)
    for r in replicas:
        grace = re.search(r"--shutdown-grace=(\d+)s", " ".join(services[r]["command"]))
        assert int(services[r]["stop_grace_period"].rstrip("s")) > int(grace.group(1))
    assert set(services["nginx"]["depends_on"]) == set(replicas)
