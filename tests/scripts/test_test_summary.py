"""scripts/test-summary: on the static suite of scripts/test (scripts/check-*) each
check counts once, and a failed check, or one that died before saying, reads failed;
every failure is named, down to the pytest test inside a CTest test, so the tail of
a run (all CI shows) says what to rerun."""
import subprocess
import sys
from pathlib import Path
from xml.sax.saxutils import escape

SUMMARY = Path(__file__).resolve().parents[2] / "scripts" / "test-summary"


def summarize(tmp_path, log: str, rc: int, suite: str = "1-static"):
    (tmp_path / f"{suite}.log").write_text(log)
    (tmp_path / f"{suite}.rc").write_text(f"{rc} 71\n")
    run = subprocess.run([sys.executable, str(SUMMARY), str(tmp_path)],
                         capture_output=True, text=True)
    return run.returncode, run.stdout.splitlines()


def test_both_checks_pass(tmp_path):
    rc, lines = summarize(tmp_path, "check-format: ok (202 files)\n"
                          "[1/14] Building CXX object ...\n"
                          "check-thread-safety: ok (14 files)\n", 0)
    assert rc == 0
    assert lines[0] == "static: 2 passed, 0 failed, 0 skipped (1 min 11 s)"


def test_a_failed_check_reads_failed(tmp_path):
    rc, lines = summarize(tmp_path, "common/dtype.h:8:10: error: code should be ...\n"
                          "check-format: FAILED: 1 of 202 files are not formatted:\n"
                          "check-thread-safety: ok (14 files)\n", 1)
    assert rc == 1
    assert lines[0] == "static: 1 passed, 1 failed, 0 skipped (1 min 11 s)"
    assert lines[1] == "    FAILED check-format"


def test_a_check_that_dies_before_its_verdict_reads_failed(tmp_path):
    rc, lines = summarize(tmp_path, "check-format: ok (202 files)\n"
                          "CMake Error: could not find CMAKE_CXX_COMPILER\n", 1)
    assert rc == 1
    assert lines[0] == "static: 1 passed, 1 failed, 0 skipped (1 min 11 s)"


def test_a_pytest_failure_inside_a_ctest_test_is_named(tmp_path):
    failed_pytest_output = (
        "tests/integration/test_a.py::test_one PASSED [ 50%]\n"
        "tests/integration/test_a.py::test_two FAILED [100%]\n"
        "=========================== short test summary info ============================\n"
        "FAILED tests/integration/test_a.py::test_two - assert 3 < 2\n"
        "========================= 1 failed, 1 passed in 4.20s ==========================\n")
    (tmp_path / "2-ctest.xml").write_text(
        '<testsuite><testcase name="unit_test" status="run"/>'
        '<testcase name="integration" status="fail"><failure message="Failed"/>'
        f"<system-out>{escape(failed_pytest_output)}</system-out></testcase>"
        '<testcase name="other_test" status="fail"><failure message="Failed"/></testcase>'
        "</testsuite>")
    rc, lines = summarize(tmp_path, "", 8, suite="2-ctest")
    assert rc == 1
    assert lines[:4] == [
        "ctest: 1 passed, 2 failed, 0 skipped (1 min 11 s)",
        "    FAILED integration: tests/integration/test_a.py::test_two",
        "    FAILED other_test",
        "total: 1 passed, 2 failed, 0 skipped"]
