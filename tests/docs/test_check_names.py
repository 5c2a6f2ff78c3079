"""The name check itself: on a small tree it reports each kind of drift with the
file, line and name, and leaves alone what is not ours (other programs' flags,
paths inside an installed package, build targets named like metrics)."""
import os
import stat

import check_names
from doc_tree import make_tree

FLAGS = {"layerserve": {"port", "model-repository", "warm-up"},
         "layerserve-cli": {"target", "json"},
         "layerserve-bench": {"method", "steps"}}
METRICS_CC = ('r_(prometheus::BuildCounter()\n    .Name("layerserve_requests_total")),\n'
              'h_(prometheus::BuildHistogram()\n    .Name("layerserve_batch_size")),\n'
              'g_(prometheus::BuildGauge().Name("layerserve_active_sessions"))\n')


def tree(tmp_path, doc, extra=None):
    files = {"server/metrics/metrics.cc": METRICS_CC,
             "client/cpp/client.h": "// the client\n",
             "client/node/examples/example.js": "// an example\n",
             "bench/CMakeLists.txt": "add_executable(layerserve_block_bench b.cc)\n",
             "docs/ops.md": doc}
    files.update(extra or {})
    make_tree(tmp_path, files)
    return str(tmp_path)


def test_missing_paths_are_reported_with_file_and_line(tmp_path):
    src = tree(tmp_path, "# Ops\n\nSee `client/cpp/client.h` and `client/cpp/gone.h`.\n\n"
                         "```sh\nkubectl apply -k bench/k8s\n```\n")
    assert check_names.findings(src) == [
        "docs/ops.md:3: client/cpp/gone.h (no such path in the tree)",
        "docs/ops.md:6: bench/k8s (no such path in the tree)",
    ]


def test_a_path_ending_in_an_ellipsis_is_a_placeholder_even_where_its_folder_exists(tmp_path):
    # As build-fuzz/findings/TARGET/crash-... once the fuzzers ran: the folder
    # exists, no file is named by the prefix.
    src = tree(tmp_path, "```sh\nreplay client/node/examples/crash-...\n```\n")
    assert check_names.findings(src) == []


def test_build_paths_are_checked_against_the_build_directory(tmp_path):
    src = tree(tmp_path / "src", "Run `build/bin/layerserve` or `build/client/layerserve-cli`.\n")
    build = tmp_path / "build"
    make_tree(build, {"bin/layerserve": ""})
    assert check_names.findings(src, str(build), flags=FLAGS) == [
        "docs/ops.md:1: build/client/layerserve-cli (no such path in the build directory)"]


def test_build_paths_the_cmake_files_declare_pass_unbuilt(tmp_path):
    src = tree(tmp_path / "src", "`build/bench/layerserve_block_bench`, `build/bin/tool`,\n"
                                 "`build/client/tool`, `build/client/go/module`, `build/bench/gone`\n"
                                 "`build/test-results/`\n",
               {"client/CMakeLists.txt": "add_executable(tool t.cc)\nset_target_properties(\n"
                                         "  tool PROPERTIES RUNTIME_OUTPUT_DIRECTORY "
                                         "${PROJECT_BINARY_DIR}/bin)\n"
                                         "set(M ${CMAKE_CURRENT_BINARY_DIR}/go/module)\n",
                "scripts/test": "#!/bin/sh\nresults=\"$PWD/build/test-results\"\n"})
    build = tmp_path / "build"
    build.mkdir()
    assert check_names.findings(src, str(build), flags=FLAGS) == [
        "docs/ops.md:2: build/client/tool (no such path in the build directory)",
        "docs/ops.md:2: build/bench/gone (no such path in the build directory)"]


def test_paths_that_are_not_the_trees_pass(tmp_path):
    src = tree(tmp_path, "Placeholders `client/<lang>/x`, `deploy/.../y`, a tag "
                         "`client/go/v0.1.0`, a glob `client/cpp/*.h`, a URL "
                         "`https://example.org/docs/x`, a package's own "
                         "`proto/grpc/health/v1/health.proto`, `PYTHONPATH=client/cpp:build/py`.\n"
                         "```sh\nmkdir -p client/cpp/_generated\nprotoc --out=client/cpp/_generated/a\n```\n",
               {"docs/clients/node.md": "`node examples/example.js`\n"})
    assert check_names.findings(src) == []


def test_flags_of_our_binaries_are_checked(tmp_path):
    src = tree(tmp_path, "```sh\n"
                         "build/bin/layerserve --port=0 --model-repostory=/m &\n"
                         "LAYERSERVE_TOKEN=x layerserve-cli --target h:1 health --jsn\n"
                         "bench=build/bin/layerserve-bench\n"
                         "$bench --method decode \\\n  --stepz 4\n"
                         "docker run --rm -p 1:2 --name layerserve layerserve:9.9.9 --prt 1\n"
                         "```\n\n"
                         "| Flag | Default |\n|---|---|\n| `--warm-up` | true |\n| `--warmup` | x |\n")
    assert check_names.findings(src, flags=FLAGS) == [
        "docs/ops.md:2: --model-repostory (passed to layerserve, which has no such flag in its --help)",
        "docs/ops.md:3: --jsn (passed to layerserve-cli, which has no such flag in its --help)",
        "docs/ops.md:5: --stepz (passed to layerserve-bench, which has no such flag in its --help)",
        "docs/ops.md:7: --prt (passed to layerserve, which has no such flag in its --help)",
        "docs/ops.md:13: --warmup (in a flag table; no binary of ours has it in its --help)",
    ]


def test_other_programs_flags_pass(tmp_path):
    src = tree(tmp_path, "```sh\ncmake --build build --target layerserve\n"
                         "kubectl wait -n layerserve --for=condition=Ready pod/x\n"
                         "docker compose -p layerserve up --build\n"
                         "LAYERSERVE_SERVER=build/bin/layerserve node --test t.js\n"
                         "layerserve --port 1 | grep --color x  # and --nothing\n```\n"
                         "`pip install --no-index x`\n")
    assert check_names.findings(src, flags=FLAGS) == []


def test_metrics_must_be_registered(tmp_path):
    src = tree(tmp_path, "`layerserve_requests_total{code=\"OK\"}`, `layerserve_batch_size_bucket`,\n"
                         "`layerserve_active_session`, rate(layerserve_request_total[5m]),\n"
                         "`layerserve_block_bench` (a target), `layerserve_client` (a package),\n"
                         "`layerserve_session_*`, `layerserve_active_*`.\n")
    assert check_names.findings(src) == [
        "docs/ops.md:2: layerserve_active_session (not a metric the server registers)",
        "docs/ops.md:2: layerserve_request_total (not a metric the server registers)",
        "docs/ops.md:4: layerserve_session_ (no registered metric starts with it)",
    ]


def test_citations_are_reported_in_docs_and_code(tmp_path):
    design, issue = "DESIGN" + ".md", "iss" + "ue 7"
    src = tree(tmp_path, f"As {design} says.\n",
               {"server/x.cc": f"// Fixed for {issue}.\nint x;\n",
                "client/go/gen/x.pb.go": f"// {issue}\n"})
    assert check_names.findings(src) == [
        f"docs/ops.md:1: {design} (cites a design document not in the repository: "
        "write the fact itself)",
        f"server/x.cc:1: {issue} (cites an issue of a tracker not in the repository: "
        "write the fact itself)",
    ]


def test_flags_come_from_the_binaries_help(tmp_path):
    for name, text in (("layerserve", "  --port=INT\n  --warm_up\n"),
                       ("layerserve-cli", "--target T\n"), ("layerserve-bench", "--steps N\n")):
        path = tmp_path / "bin" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{text}EOF\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    assert check_names.help_flags(str(tmp_path)) == {
        "layerserve": {"port", "warm-up"}, "layerserve-cli": {"target"},
        "layerserve-bench": {"steps"}}


def test_the_real_tree_has_no_drift_in_paths_metrics_and_flags():
    """The same run as the docs_names CTest entry, without the build directory."""
    source_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    assert "README.md" in check_names.markdown_files(source_dir)
    assert check_names.registered_metrics(source_dir) >= {
        "layerserve_requests_total", "layerserve_active_sessions",
        "layerserve_decode_step_duration_seconds_bucket"}
