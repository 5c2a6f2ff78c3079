"""The link check itself: it reports a dead file and a dead anchor, and passes live
links, GitHub's heading slugs, external links and links inside code."""
import os

import check_links
from doc_tree import make_tree


def test_dead_file_and_dead_anchor_are_reported(tmp_path):
    make_tree(tmp_path, {
        "README.md": "See [the summary](docs/SUMMARY.md) and\n[ops](docs/ops.md#nowhere).\n",
        "docs/ops.md": "# Operations\n\n## Running it\n",
    })
    assert check_links.dead_links(str(tmp_path)) == [
        "README.md:1: docs/SUMMARY.md (no such file)",
        "README.md:2: docs/ops.md#nowhere (no heading or id #nowhere in docs/ops.md)",
    ]


def test_live_links_pass(tmp_path):
    make_tree(tmp_path, {
        "README.md": "[ops](docs/ops.md#running-it-v2-fast), [perf](docs/perf/),\n"
                     "[a note](docs/perf/2026-11-30-x.md \"title\"), [top](#project),\n"
                     "[second](docs/ops.md#running-it-v2-fast-1), [id](docs/ops.md#pinned),\n"
                     "![img](docs/perf/2026-11-30-x.md), [ref]\n\n"
                     "[ref]: docs/ops.md#operations\n\n# Project\n",
        "docs/ops.md": "# Operations\n\n## Running it: `v2`, **fast**!\n\n"
                       "## Running it: v2, fast\n\n<a id=\"pinned\"></a>\n",
        "docs/perf/2026-11-30-x.md": "# X\n\n[up](../../README.md#project)\n",
    })
    assert check_links.dead_links(str(tmp_path)) == []


def test_external_links_and_code_are_not_checked(tmp_path):
    make_tree(tmp_path, {
        "README.md": "[site](https://example.org/missing), [mail](mailto:a@b.c),\n"
                     "`[not a link](missing.md)`\n\n```md\n[nor this](missing.md)\n```\n",
    })
    assert check_links.dead_links(str(tmp_path)) == []


def test_the_real_tree_is_found():
    source_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    files = check_links.markdown_files(source_dir)
    assert "README.md" in files
    assert os.path.join("docs", "BENCHMARKS.md") in files
    assert os.path.join("client", "python", "README.md") in files
    assert os.path.join("deploy", "kserve", "README.md") in files
