"""The real layerserve binary on ephemeral loopback ports, for the Python tests
(tests/integration, tests/deploy): ServerProcess and the helpers around it.

Paths come from CTest's environment (tests/integration/CMakeLists.txt,
tests/deploy/CMakeLists.txt): LAYERSERVE_SERVER, LAYERSERVE_CLI,
LAYERSERVE_SOURCE_DIR; PYTHONPATH holds the generated stubs and this folder.
"""
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import grpc

from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
from metrics_text import parse_samples

SERVER = os.environ.get("LAYERSERVE_SERVER", "build/bin/layerserve")
CLI = os.environ.get("LAYERSERVE_CLI", "build/bin/layerserve-cli")
SOURCE_DIR = Path(os.environ.get("LAYERSERVE_SOURCE_DIR", Path(__file__).parents[2]))

_GRPC_LINE = re.compile(r"gRPC listening on (\S+)")
_METRICS_LINE = re.compile(r"metrics on (http://\S+)")


class ServerProcess:
    """A running layerserve: its gRPC target, metrics URL and captured stdout."""

    def __init__(self, *extra_args, wrapper=()):
        args = [*wrapper, SERVER, "--host=127.0.0.1", "--port=0", "--metrics-port=0",
                *extra_args]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines = []
        self.target = None
        self.metrics_url = None
        ready = threading.Event()

        def read_output():
            for line in self.proc.stdout:
                self.lines.append(line)
                if m := _GRPC_LINE.search(line):
                    self.target = m.group(1)
                if m := _METRICS_LINE.search(line):
                    self.metrics_url = m.group(1)
                if self.target and self.metrics_url:
                    ready.set()
            ready.set()  # The process ended: stop waiting.

        self._reader = threading.Thread(target=read_output, daemon=True)
        self._reader.start()
        if not ready.wait(timeout=30) or not self.target:
            code = self.proc.poll()
            self.proc.kill()
            # A sanitizer build that halts writes its report to its log_path, not
            # here: the exit code (66 for TSan, 1 for ASan) says to look there.
            how = "still running after 30 s" if code is None else f"exited with {code}"
            raise RuntimeError(f"layerserve did not start ({how}):\n" + "".join(self.lines))

    def metrics(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            return response.read().decode()

    def metric_value(self, name: str) -> float:
        """The value of an unlabelled sample `name` in /metrics."""
        for line in self.metrics().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)

    def metric_sum(self, name: str, **labels) -> float:
        """The sum of every sample `name` whose labels include `labels` (0 if none)."""
        return sum(value for sample_labels, value in parse_samples(self.metrics(), name)
                   if all(sample_labels.get(k) == v for k, v in labels.items()))

    def nonfinite_moved(self, method: str, send) -> dict:
        """Runs send() and returns how much layerserve_nonfinite_values_total of
        `method` moved, {(where, kind): delta} for the series that moved. The
        server counts before it answers, so the counters are final once send()
        has its reply."""
        def counts():
            return {(where, kind): self.metric_sum("layerserve_nonfinite_values_total",
                                                   method=method, where=where, kind=kind)
                    for where in ("input", "output") for kind in ("nan", "inf")}
        before = counts()
        send()
        after = counts()
        return {k: after[k] - before[k] for k in after if after[k] != before[k]}

    def stop(self, sig=signal.SIGTERM, timeout=60) -> int:
        """Sends `sig` and returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code

    def output(self) -> str:
        return "".join(self.lines)


def started(*args):
    """A server with `args`, a channel to it (64 MiB responses) and a stub."""
    process = ServerProcess(*args)
    channel = grpc.insecure_channel(process.target,
                                    options=[("grpc.max_receive_message_length", 64 << 20)])
    return process, channel, pb_grpc.LayerServiceStub(channel)


def stop(process, channel):
    """Closes the channel; the server must then shut down cleanly (exit 0)."""
    channel.close()
    assert process.stop() == 0, process.output()


def run_cli(*args, timeout=60):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def wait_for(predicate, timeout=10.0, interval=0.005):
    """Polls predicate() until it is true (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def free_port():
    """A loopback port the OS just handed out, for programs that cannot bind port 0
    themselves (nginx, podman health checks). Callers retry if it is taken."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
