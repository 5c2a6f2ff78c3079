"""The package from the source tree: the examples against a real server, and stubs
made with the documented protoc command inside a copy of the source tree, used
from a clean interpreter. The wheel installed into a venv: test_wheel.py."""
import os
import shutil
import subprocess
import sys

from conftest import SOURCE_DIR, documented_commands
from layerserve_client._stubs import PROTOC_HINT

PACKAGE_DIR = os.path.join(SOURCE_DIR, "client", "python")
EXAMPLES = os.path.join(PACKAGE_DIR, "examples")

# Run in a fresh interpreter: numbers checked, stubs must come from `where`.
USER_SCRIPT = """
import sys
import numpy as np
import layerserve_client
from layerserve.v1 import layerserve_pb2
assert layerserve_pb2.__file__.startswith(sys.argv[2]), layerserve_pb2.__file__
assert layerserve_client.__file__.startswith(sys.argv[2]), layerserve_client.__file__
with layerserve_client.Client(sys.argv[1], timeout=10) as client:
    assert client.health() == "SERVING"
    x = np.arange(1, 9, dtype=np.float32).reshape(2, 4)
    y = client.normalize(x, "rms", epsilon=0.0)
    want = x / np.sqrt((x * x).mean(-1, keepdims=True))
    assert np.allclose(y, want, rtol=1e-6), y
    # The google.rpc stubs came along: the server's error details are read.
    from google.rpc import error_details_pb2
    assert error_details_pb2.__file__.startswith(sys.argv[2]), error_details_pb2.__file__
    try:
        client.normalize(x, "rms", weight=np.ones(3, np.float32))
        raise AssertionError("no error")
    except layerserve_client.LayerServeError as e:
        assert e.field_violations == [("weight.shape", e.details)], e.field_violations
print("ok")
"""


def run_example(name, target):
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, name), "--target", target],
                          capture_output=True, text=True, timeout=120)


def test_normalize_example(server):
    result = run_example("normalize.py", server.target)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(" of ")[0] for line in lines] == \
        ["RMSNorm", "residual + LayerNorm", "residual sum"]
    for line in lines:
        assert float(line.rsplit("= ", 1)[1]) < 1e-4, line


def test_block_forward_example(server):
    result = run_example("block_forward.py", server.target)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert out.startswith("model demo: llama, 4 layers, hidden 512, 8 heads (2 kv), d_ff 1408")
    assert "hidden states [1, 16, 512]" in out
    assert sum(line.startswith("layer ") for line in out.splitlines()) == 4
    split = float(out.rsplit("max |diff| = ", 1)[1])
    assert split < 1e-4


def copy_sources(root):
    """client/python and proto/ laid out as in the repository, under root."""
    shutil.copytree(PACKAGE_DIR, os.path.join(root, "client", "python"),
                    ignore=shutil.ignore_patterns("__pycache__", "_generated", "build",
                                                  "*.egg-info", "tests"))
    shutil.copytree(os.path.join(SOURCE_DIR, "proto"), os.path.join(root, "proto"))
    return os.path.join(root, "client", "python")


def clean_env(pythonpath):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = pythonpath
    return env


def test_documented_protoc_command(server, tmp_path):
    commands = documented_commands("generate-stubs")
    # The import error's hint gives the same commands.
    hint = [" ".join(line.split()) for line in PROTOC_HINT.splitlines()]
    assert all(command in hint for command in commands), (commands, hint)
    copy = copy_sources(str(tmp_path))
    # Without stubs the import fails, and says how to make them.
    result = subprocess.run([sys.executable, "-s", "-c", "import layerserve_client"],
                            capture_output=True, text=True, env=clean_env(copy),
                            cwd=tmp_path, timeout=60)
    assert result.returncode != 0
    assert "layerserve_client: no layerserve.v1 stubs" in result.stderr
    assert all(command in " ".join(result.stderr.split()) for command in commands)
    for command in commands:
        subprocess.run(command, shell=True, cwd=tmp_path, check=True)
    generated = os.path.join(copy, "layerserve_client", "_generated", "layerserve", "v1")
    assert sorted(os.listdir(generated)) == ["layerserve_pb2.py", "layerserve_pb2_grpc.py"]
    result = subprocess.run([sys.executable, "-s", "-c", USER_SCRIPT, server.target, copy],
                            capture_output=True, text=True, env=clean_env(copy),
                            cwd=tmp_path, timeout=60)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stderr
