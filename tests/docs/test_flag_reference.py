"""tests/docs/flag_reference.py: parses --help, refuses a flag no group names, and
its check fails when docs/operations/configuration.md and the binary differ. The
binary is LAYERSERVE_SERVER (CTest sets it), else build/bin/layerserve."""
import os
import shutil

import pytest

import flag_reference

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SERVER = os.environ.get("LAYERSERVE_SERVER", os.path.join(ROOT, "build", "bin", "layerserve"))

SAMPLE = """Usage: layerserve [--flag=VALUE ...]

Flags ("--flag VALUE" and --flag_name work too):
  --host=STRING  (default "0.0.0.0")
      Address the gRPC and metrics listeners bind to (0.0.0.0: all IPv4).
  --session-ttl=DURATION  (default 5m)
      A session without a call for this long expires
      (its cache is freed).
  --warm-up  (default true)
      Before health says SERVING, run calls | of every model.
  --help
      Print this text and exit.
"""


def test_parse_help():
    assert flag_reference.parse_help(SAMPLE) == [
        ("host", "STRING", '"0.0.0.0"',
         "Address the gRPC and metrics listeners bind to (0.0.0.0: all IPv4)."),
        ("session-ttl", "DURATION", "5m",
         "A session without a call for this long expires (its cache is freed)."),
        ("warm-up", "BOOL", "true", "Before health says SERVING, run calls | of every model."),
        ("help", "", None, "Print this text and exit."),
    ]


def test_a_flag_without_group_is_refused():
    flags = flag_reference.parse_help(SAMPLE) + [("new-flag", "INT", "0", "New.")]
    with pytest.raises(ValueError, match="new-flag"):
        flag_reference.render(flags)


@pytest.fixture
def source_copy(tmp_path):
    doc = os.path.join(tmp_path, flag_reference.DOC)
    os.makedirs(os.path.dirname(doc))
    shutil.copy(os.path.join(ROOT, flag_reference.DOC), doc)
    return tmp_path, doc


def test_the_document_matches_the_binary():
    assert flag_reference.main(["--binary", SERVER, ROOT]) == 0


def test_check_fails_on_drift_and_write_repairs_it(source_copy, capsys):
    source, doc = source_copy
    with open(doc) as f:
        text = f.read()
    assert "| `--session-ttl` |" in text and "| `--max-kv-cache-bytes` |" in text
    # A default changed in the doc only, and a flag's row removed.
    drifted = text.replace("| `--session-ttl` | duration | `5m` |",
                           "| `--session-ttl` | duration | `10m` |")
    drifted = "\n".join(l for l in drifted.split("\n")
                        if not l.startswith("| `--max-kv-cache-bytes` |"))
    assert drifted != text
    with open(doc, "w") as f:
        f.write(drifted)
    assert flag_reference.main(["--binary", SERVER, str(source)]) == 1
    err = capsys.readouterr().err
    assert "-| `--session-ttl` | duration | `10m` |" in err
    assert "+| `--max-kv-cache-bytes` |" in err
    assert flag_reference.main(["--binary", SERVER, "--write", str(source)]) == 0
    with open(doc) as f:
        assert f.read() == text
