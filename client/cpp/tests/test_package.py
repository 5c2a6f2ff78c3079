"""The C++ client as a user gets it (client/cpp/CMakeLists.txt, CTest entry
cpp_client_package): `cmake --install` of this build into a temporary prefix, then
the installed example built as a CMake project of its own (find_package) and as one
file with pkg-config, each run against the real server.

Environment (CTest): LAYERSERVE_BINARY_DIR, LAYERSERVE_SERVER, LAYERSERVE_VERSION,
CMAKE_COMMAND, CMAKE_CXX_COMPILER; PYTHONPATH holds tests/testing (ServerProcess)
and the generated Python stubs it imports.
"""
import os
import re
import shlex
import shutil
import subprocess

import pytest

from server_process import ServerProcess, free_port

BUILD = os.environ["LAYERSERVE_BINARY_DIR"]
VERSION = os.environ["LAYERSERVE_VERSION"]
CMAKE = os.environ.get("CMAKE_COMMAND", "cmake")
CXX = os.environ.get("CMAKE_CXX_COMPILER", "c++")
CCACHE = shutil.which("ccache")
EXAMPLES = "share/doc/layerserve-client/examples"


def run(args, env=None, cwd=None):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                            timeout=240, env=env, cwd=cwd)
    assert result.returncode == 0, (f"{shlex.join(map(str, args))} exited "
                                    f"{result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def compile_env(base):
    """ccache's paths relative to `base` (the pytest temp root), so that runs in new
    temp folders share its cache."""
    return dict(os.environ, CCACHE_BASEDIR=str(base))


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("prefix")
    run([CMAKE, "--install", BUILD, "--prefix", prefix])
    return prefix


@pytest.fixture(scope="module")
def server():
    process = ServerProcess()
    yield process
    assert process.stop() == 0, process.output()


def check_example_output(stdout, steps):
    """The example's one summary line: this version, and a session of the prefill's 4
    tokens plus `steps` (the example checked each reply's length itself)."""
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    pattern = (rf"layerserve-cpp-example {re.escape(VERSION)}: model demo layers 0\.\.\d+, "
               rf"normalize ok, session of {4 + steps} tokens \(prefill 4 \+ {steps} "
               rf"decode steps\) closed, \d+ ms")
    assert re.fullmatch(pattern, lines[0]), lines[0]


def test_install_lays_out_the_package(prefix):
    for binary in ("layerserve", "layerserve-cli", "layerserve-bench"):
        assert os.access(prefix / "bin" / binary, os.X_OK), binary
    include = prefix / "include/layerserve/client"
    for header in ("client.h", "credentials.h", "error_details.h", "npy.h", "pipeline.h",
                   "tensor_util.h", "common/dtype.h", "layerserve/v1/layerserve.grpc.pb.h",
                   "grpc/health/v1/health.grpc.pb.h", "google/rpc/error_details.pb.h"):
        assert (include / header).is_file(), header
    assert f'#define LAYERSERVE_CLIENT_VERSION "{VERSION}"' in (include / "version.h").read_text()
    assert (prefix / "lib/liblayerserve_client.a").is_file()
    cmake_dir = prefix / "lib/cmake/layerserve_client"
    assert f'set(PACKAGE_VERSION "{VERSION}")' in (
        cmake_dir / "layerserve_client-config-version.cmake").read_text()
    # Nothing of the package points back into the source or build tree.
    source_dir = os.environ["LAYERSERVE_SOURCE_DIR"]
    for f in [*cmake_dir.iterdir(), prefix / "lib/pkgconfig/layerserve-client.pc"]:
        text = f.read_text()
        assert source_dir not in text and BUILD not in text, f


@pytest.fixture(scope="module")
def cmake_example(prefix, tmp_path_factory):
    """The installed example built as a CMake project of its own: its binary."""
    build = tmp_path_factory.mktemp("example-cmake")
    env = compile_env(tmp_path_factory.getbasetemp())
    launcher = [f"-DCMAKE_CXX_COMPILER_LAUNCHER={CCACHE}"] if CCACHE else []
    # No build type: -O0 compiles fastest, and this checks the package, not speed.
    run([CMAKE, "-S", prefix / EXAMPLES, "-B", build, "-G", "Ninja",
         f"-DCMAKE_PREFIX_PATH={prefix}", f"-DCMAKE_CXX_COMPILER={CXX}", *launcher], env=env)
    cache = (build / "CMakeCache.txt").read_text()
    assert f"layerserve_client_DIR:PATH={prefix}/lib/cmake/layerserve_client" in cache
    run([CMAKE, "--build", build], env=env)
    return build / "layerserve-cpp-example"


def test_example_builds_with_find_package_and_runs(cmake_example, server):
    steps = 3
    out = run([cmake_example, "--address", server.target, "--steps", steps])
    check_example_output(out.stdout, steps)


def test_example_fails_with_a_message_when_no_server_answers(cmake_example):
    result = subprocess.run([cmake_example, "--address", f"127.0.0.1:{free_port()}"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result
    assert result.stdout == ""
    assert "UNAVAILABLE" in result.stderr, result.stderr


def test_example_builds_with_pkg_config_and_runs(prefix, server, tmp_path_factory):
    build = tmp_path_factory.mktemp("example-pkg-config")
    env = compile_env(tmp_path_factory.getbasetemp())
    env["PKG_CONFIG_PATH"] = str(prefix / "lib/pkgconfig")
    cflags = shlex.split(run(["pkg-config", "--cflags", "layerserve-client"], env=env).stdout)
    libs = shlex.split(run(["pkg-config", "--libs", "layerserve-client"], env=env).stdout)
    assert run(["pkg-config", "--modversion", "layerserve-client"],
               env=env).stdout.strip() == VERSION
    # Compiled (through ccache when present) and linked apart: ccache caches no link.
    run([*([CCACHE] if CCACHE else []), CXX, "-std=c++17", *cflags, "-c",
         prefix / EXAMPLES / "session_decode.cc", "-o", "session_decode.o"], env=env, cwd=build)
    run([CXX, "session_decode.o", "-o", "example", *libs], env=env, cwd=build)

    steps = 2
    out = run([build / "example", "--address", server.target, "--steps", steps])
    check_example_output(out.stdout, steps)
