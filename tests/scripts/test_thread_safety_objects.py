"""scripts/thread-safety-objects picks the translation units that lock, directly or
through the project's headers, and only those."""
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "thread-safety-objects"

SOURCES = {
    "server/guarded.h": "int n ABSL_GUARDED_BY(mu);\n",
    "server/uses_guarded.h": '#include "server/guarded.h"\n',
    "server/via_header.cc": '#include "server/uses_guarded.h"\n',
    "server/own_mutex.cc": "absl::MutexLock lock(&mu_);\n",
    "kernels/no_lock.cc": '#include <mutex>\n#include "kernels/plain.h"\n',
    "kernels/plain.h": "std::mutex m;  // libstdc++: no annotations\n",
}


def test_picks_the_files_that_lock(tmp_path):
    for name, text in SOURCES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    build = tmp_path / "build"
    build.mkdir()
    commands = [{"directory": str(build), "file": str(tmp_path / name),
                 "command": f"c++ -O0 -o {name}.o -c {tmp_path / name}"}
                for name in SOURCES if name.endswith(".cc")]
    (build / "compile_commands.json").write_text(json.dumps(commands))
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), str(build)],
                         capture_output=True, text=True, check=True).stdout
    assert sorted(out.split()) == ["server/own_mutex.cc.o", "server/via_header.cc.o"]
