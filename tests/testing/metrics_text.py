"""Samples out of Prometheus exposition text (layerserve's /metrics), for the
Python tests."""
import re

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_samples(text: str, name: str):
    """(labels dict, value) of every sample called exactly `name` in exposition text."""
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == name:
            yield dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))


def metric_samples(text, name):
    """{frozenset(labels.items()): value} of every sample of `name` in exposition
    text."""
    return {frozenset(labels.items()): value for labels, value in parse_samples(text, name)}


def requests_ok(metrics_text, method="Normalize"):
    """layerserve_requests_total{method, code="OK"} (0 before the first call)."""
    key = frozenset({("method", method), ("code", "OK")})
    return metric_samples(metrics_text, "layerserve_requests_total").get(key, 0.0)
