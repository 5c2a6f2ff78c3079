"""scripts/test-summary on the static suite of scripts/test (scripts/check-*): each
check counts once, and a failed check, or one that died before saying, reads failed."""
import subprocess
import sys
from pathlib import Path

SUMMARY = Path(__file__).resolve().parents[2] / "scripts" / "test-summary"


def summarize(tmp_path, log: str, rc: int):
    (tmp_path / "1-static.log").write_text(log)
    (tmp_path / "1-static.rc").write_text(f"{rc} 71\n")
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


def test_a_check_that_dies_before_its_verdict_reads_failed(tmp_path):
    rc, lines = summarize(tmp_path, "check-format: ok (202 files)\n"
                          "CMake Error: could not find CMAKE_CXX_COMPILER\n", 1)
    assert rc == 1
    assert lines[0] == "static: 1 passed, 1 failed, 0 skipped (1 min 11 s)"
