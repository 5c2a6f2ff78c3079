"""docs/operations/observability.md's metric reference against a real server (one
scrape, after calls that bring out every metric family): it matches, and the check
fails naming the metric when a registered one is missing from the document or the
document names one the server does not register. The binary is LAYERSERVE_SERVER
(CTest sets it), else build/bin/layerserve."""
import os
import shutil

import pytest

import metric_reference as ref

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SERVER = os.environ.get("LAYERSERVE_SERVER", os.path.join(ROOT, "build", "bin", "layerserve"))
SESSION_METRICS = ["layerserve_active_sessions", "layerserve_kv_cache_bytes",
                   "layerserve_session_expiries_total", "layerserve_session_evictions_total"]


@pytest.fixture(scope="module")
def families():
    return ref.parse_exposition(ref.scrape(SERVER))


@pytest.fixture
def source_copy(tmp_path):
    """A copy of what the check reads: the document, server/, the dashboard, rules."""
    for part in ("server", os.path.join("deploy", "grafana"),
                 os.path.join("deploy", "prometheus", "rules")):
        shutil.copytree(os.path.join(ROOT, part), tmp_path / part)
    os.makedirs(tmp_path / "docs" / "operations")
    shutil.copy(os.path.join(ROOT, ref.DOC), tmp_path / ref.DOC)
    return tmp_path


def test_every_registered_metric_is_scraped_with_type_and_help(families):
    assert set(families) == ref.registered_metrics(ROOT)
    assert set(SESSION_METRICS) <= set(families)
    for name, family in families.items():
        assert family["type"] in ("counter", "gauge", "histogram"), name
        assert family["help"], name
    assert families["layerserve_decode_step_duration_seconds"]["labels"] == {"model"}
    assert families["layerserve_requests_total"]["labels"] == {"method", "code", "model"}


def test_the_document_matches_the_server(families, capsys):
    assert ref.check(ROOT, families) == 0, capsys.readouterr().err
    with open(os.path.join(ROOT, ref.DOC)) as f:
        doc = f.read()
    for name in SESSION_METRICS:
        assert f"| `{name}` |" in doc


def test_a_metric_missing_from_the_document_fails(families, source_copy, capsys):
    doc = source_copy / ref.DOC
    text = doc.read_text()
    doc.write_text("\n".join(l for l in text.split("\n")
                             if not l.startswith("| `layerserve_kv_cache_bytes` |")))
    assert ref.check(str(source_copy), families) == 1
    assert "missing from docs/operations/observability.md: ['layerserve_kv_cache_bytes']" \
        in capsys.readouterr().err
    assert ref.check(str(source_copy), families, write=True) == 0
    assert doc.read_text() == text


def test_a_documented_metric_not_registered_fails(families, source_copy, capsys):
    doc = source_copy / ref.DOC
    text = doc.read_text()
    row = "| `layerserve_made_up_total` | counter | none | Not a metric. | none | none |\n"
    doc.write_text(text.replace("\n<!-- END GENERATED -->", "\n" + row + "<!-- END GENERATED -->"))
    assert ref.check(str(source_copy), families) == 1
    assert "documented but not registered: ['layerserve_made_up_total']" \
        in capsys.readouterr().err


def test_a_metric_registered_but_not_scraped_fails(families, source_copy, capsys):
    extra = source_copy / "server" / "extra.cc"
    extra.write_text('auto& f = prometheus::BuildGauge().Name("layerserve_new_gauge");\n')
    assert ref.check(str(source_copy), families) == 1
    assert "registered but not scraped: ['layerserve_new_gauge']" in capsys.readouterr().err
