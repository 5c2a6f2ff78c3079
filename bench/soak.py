#!/usr/bin/python3
"""Soak: a real layerserve under mixed traffic for a bounded time and request count.

Keeps --concurrency calls in flight (64 by default) over 8 channels: Normalize,
Activate, PositionalEncode, BlockForward on the demo model, ListModels; about 10% of
them bad inputs (each with the one status code it must get), 5% cancelled by the
client 0-5 ms after they start, 5% with a 1-5 ms deadline. Good answers are checked
(numbers for Normalize and Activate against numpy, shapes for the rest).

Reports requests sent, answered by status code, unanswered, the server's own
requests_total, and its resident memory (VmRSS) at start, middle and end. Exits 1 if
any call is unanswered (no answer within its deadline of --call-timeout seconds, or
none at all), if any call gets a code its kind does not allow, if a good answer is
wrong, if the server's counts disagree with the client's, if the server does not
drain and exit 0, or if RSS grows more than --max-rss-growth-mib over the last
--rss-window seconds (the second half by default). Memory must level off: RSS climbs
to the peak of buffers in use at once and then moves around it, as jemalloc reuses
freed memory and returns what stays unused for 10 s (server/rpc/allocator.h). A leak
grows with the call count instead: at ~2000 calls/s, 1 KiB per call is ~70 MiB a
minute.

Usage: /usr/bin/python3 bench/soak.py [--build build] [--duration 300]
       [--max-requests 5000000] [--concurrency 64] [--seed 1]
       [--rss-window 600 --max-rss-growth-mib 16] [--expect-allocator jemalloc]
       [--server-env LD_PRELOAD=/path/to/another/malloc.so]
Everything runs on 127.0.0.1 with OS-picked ports. Results: docs/perf/2026-11-30-soak.md,
docs/perf/2026-12-02-allocator.md (summary: docs/BENCHMARKS.md).
"""
import argparse
import heapq
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import grpc
import numpy as np

HIDDEN = 512  # The demo model: hidden 512, 4 layers.
LAYERS = 4
ELEMENT_LIMIT = 1 << 18  # --max-request-elements for the soak server.
ALLOWED = {  # Codes each kind of call may end with.
    "good": {"OK"},
    "cancelled": {"OK", "CANCELLED"},
    "short_deadline": {"OK", "DEADLINE_EXCEEDED"},
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build", help="CMake build directory")
    parser.add_argument("--duration", type=float, default=300, help="seconds of load")
    parser.add_argument("--max-requests", type=int, default=5_000_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--call-timeout", type=float, default=60,
                        help="deadline of every call that has no short one")
    parser.add_argument("--max-rss-growth-mib", type=float, default=48,
                        help="most VmRSS may grow over the last --rss-window seconds")
    parser.add_argument("--rss-window", type=float, default=None,
                        help="seconds at the end whose VmRSS growth is bounded "
                             "(default: the second half)")
    parser.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment for the server, e.g. LD_PRELOAD=... to try "
                             "another allocator")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="extra server flag")
    parser.add_argument("--expect-allocator", default=None,
                        help="fail unless the server's start-up line names this memory "
                             "allocator (e.g. jemalloc)")
    return parser.parse_args()


class Server:
    """layerserve on port 0; the target and metrics URL come from its first lines."""

    def __init__(self, binary, env, extra_args):
        self.proc = subprocess.Popen(
            [binary, "--host=127.0.0.1", "--port=0", "--metrics-port=0",
             f"--max-request-elements={ELEMENT_LIMIT}", "--shutdown-grace=60s", *extra_args],
            stdout=subprocess.PIPE, text=True,
            env={**os.environ, **dict(e.split("=", 1) for e in env)})
        self.target = self.metrics_url = None
        self.allocator = "unknown"
        while self.target is None or self.metrics_url is None:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("layerserve did not start")
            if m := re.search(r"memory allocator (.+)", line):
                self.allocator = m.group(1)
            if m := re.search(r"gRPC listening on (\S+)", line):
                self.target = m.group(1)
            if m := re.search(r"metrics on (\S+)", line):
                self.metrics_url = m.group(1)
        # Keep reading, so a full pipe never blocks the server.
        threading.Thread(target=lambda: self.proc.stdout.read(), daemon=True).start()

    def status(self, field):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise RuntimeError(f"no {field}")

    def rss_mib(self):
        return self.status("VmRSS") / 1024

    def samples(self, name):
        """{labels text: value} of the samples called `name`."""
        text = urllib.request.urlopen(self.metrics_url, timeout=10).read().decode()
        return {m.group(1) or "": float(m.group(2)) for m in
                re.finditer(rf"^{name}(?:\{{(.*)\}})? (\S+)$", text, re.M)}


def tensor(pb, a):
    a = np.ascontiguousarray(a, dtype="<f4")
    return pb.Tensor(shape=list(a.shape), dtype=pb.FLOAT32, data=a.tobytes())


def out_values(t, shape):
    return np.frombuffer(t.data, dtype="<f4").reshape(shape)


class Workload:
    """Pools of prepared requests with their checks, so the client spends its CPU on
    calls, not on making them. Each entry: (method, request, check(reply)) for good
    calls, (method, request, expected code) for bad ones."""

    def __init__(self, pb, rng):
        self.good, self.bad = [], []
        for _ in range(64):
            self._add_good(pb, rng)
        self._add_bad(pb, rng)

    def _add_good(self, pb, rng):
        rows, dim = int(rng.integers(1, 65)), int(rng.choice([64, 512, 1024]))
        x = rng.standard_normal((rows, dim)).astype(np.float32)
        want = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, -1, keepdims=True) + 1e-6)
        self.good.append(("Normalize", pb.NormalizeRequest(kind=pb.RMS_NORM, input=tensor(pb, x)),
                          lambda r, want=want: np.allclose(out_values(r.output, want.shape),
                                                           want, rtol=1e-5, atol=1e-6)))
        x = rng.standard_normal((rows, dim)).astype(np.float32)
        self.good.append(("Activate", pb.ActivateRequest(activation=pb.RELU, input=tensor(pb, x)),
                          lambda r, want=np.maximum(x, 0): np.array_equal(
                              out_values(r.output, want.shape), want)))
        packed = rng.standard_normal((rows, 2 * dim)).astype(np.float32)
        self.good.append(("Activate", pb.ActivateRequest(activation=pb.SWIGLU,
                                                         input=tensor(pb, packed)),
                          lambda r, s=[rows, dim]: list(r.output.shape) == s))
        t = int(rng.integers(1, 33))
        self.good.append(("PositionalEncode", pb.PositionalEncodeRequest(
            sinusoidal=pb.Sinusoidal(input=tensor(pb, rng.standard_normal((t, dim))),
                                     position_offset=int(rng.integers(0, 100)))),
            lambda r, s=[t, dim]: list(r.output.shape) == s))
        q = rng.standard_normal((1, 8, t, 64))
        self.good.append(("PositionalEncode", pb.PositionalEncodeRequest(rope=pb.Rope(
            query=tensor(pb, q), key=tensor(pb, rng.standard_normal((1, 2, t, 64))))),
            lambda r, s=[1, 8, t, 64]: list(r.output.shape) == s))
        self.good.append(("PositionalEncode", pb.PositionalEncodeRequest(alibi=pb.Alibi(
            num_heads=8, query_length=t, key_length=t)),
            lambda r, s=[8, t, t]: list(r.output.shape) == s))
        b, t = int(rng.integers(1, 3)), int(rng.integers(1, 33))
        block = pb.BlockForwardRequest(
            hidden_states=tensor(pb, rng.standard_normal((b, t, HIDDEN))),
            num_layers=int(rng.integers(1, 3)), position_offset=int(rng.integers(0, 64)))
        if b > 1:
            block.sequence_lengths.extend(int(n) for n in rng.integers(1, t + 1, size=b))
        self.good.append(("BlockForward", block,
                          lambda r, s=[b, t, HIDDEN]: list(r.hidden_states.shape) == s
                          and np.all(np.isfinite(out_values(r.hidden_states, s)))))
        self.good.append(("ListModels", pb.ListModelsRequest(),
                          lambda r: [m.name for m in r.models] == ["demo"]))

    def _add_bad(self, pb, rng):
        x = rng.standard_normal((4, 64)).astype(np.float32)
        short = tensor(pb, x)
        short.data = short.data[:-4]
        hidden = tensor(pb, rng.standard_normal((1, 4, HIDDEN)))
        self.bad = [
            ("Normalize", pb.NormalizeRequest(kind=pb.RMS_NORM, input=short), "INVALID_ARGUMENT"),
            ("Normalize", pb.NormalizeRequest(input=tensor(pb, x)), "INVALID_ARGUMENT"),
            ("Normalize", pb.NormalizeRequest(kind=pb.LAYER_NORM, input=tensor(
                pb, np.ones((1, ELEMENT_LIMIT + 1)))), "RESOURCE_EXHAUSTED"),
            ("Activate", pb.ActivateRequest(input=tensor(pb, x)), "INVALID_ARGUMENT"),
            ("Activate", pb.ActivateRequest(activation=pb.GEGLU, input=tensor(
                pb, np.ones((2, 7)))), "INVALID_ARGUMENT"),
            ("PositionalEncode", pb.PositionalEncodeRequest(learned=pb.Learned(
                input=tensor(pb, x), table=tensor(pb, np.zeros((16, 64))),
                position_offset=15)), "OUT_OF_RANGE"),
            ("PositionalEncode", pb.PositionalEncodeRequest(), "INVALID_ARGUMENT"),
            ("BlockForward", pb.BlockForwardRequest(model="no-such-model", hidden_states=hidden),
             "NOT_FOUND"),
            ("BlockForward", pb.BlockForwardRequest(layer_start=LAYERS, hidden_states=hidden),
             "OUT_OF_RANGE"),
            ("BlockForward", pb.BlockForwardRequest(hidden_states=tensor(
                pb, np.ones((1, 4, 100)))), "INVALID_ARGUMENT"),
        ]


class Canceller:
    """Cancels futures at given times, from one thread."""

    def __init__(self):
        self._heap, self._cv, self._n = [], threading.Condition(), 0
        threading.Thread(target=self._run, daemon=True).start()

    def cancel_at(self, when, future):
        with self._cv:
            self._n += 1
            heapq.heappush(self._heap, (when, self._n, future))
            self._cv.notify()

    def _run(self):
        while True:
            with self._cv:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cv.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                _, _, future = heapq.heappop(self._heap)
            future.cancel()


class Tally:
    """Counts by (kind, method, code), wrong answers, and unexpected codes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.answered = {}
        self.unexpected = []  # The first few (kind, method, code) not allowed.
        self.unexpected_count = 0
        self.wrong = 0
        self.unanswered = 0

    def record(self, kind, method, code, expected, good_answer):
        with self.lock:
            key = (kind, method, code)
            self.answered[key] = self.answered.get(key, 0) + 1
            if code == "DEADLINE_EXCEEDED" and kind in ("good", "bad", "cancelled"):
                # A call with the full deadline that got no answer within it.
                self.unanswered += 1
            elif code not in expected:
                if len(self.unexpected) < 20:
                    self.unexpected.append(key)
                self.unexpected_count += 1
            if good_answer is False:
                self.wrong += 1

    def by_code(self, kinds=None):
        out = {}
        for (kind, _, code), n in self.answered.items():
            if kinds is None or kind in kinds:
                out[code] = out.get(code, 0) + n
        return out


def main():
    args = parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    from layerserve.v1 import layerserve_pb2 as pb
    from layerserve.v1 import layerserve_pb2_grpc as pb_grpc

    rng = np.random.default_rng(args.seed)
    picker = random.Random(args.seed)
    workload = Workload(pb, rng)
    server = Server(os.path.join(args.build, "bin", "layerserve"), args.server_env,
                    args.server_arg)
    channels = [grpc.insecure_channel(server.target) for _ in range(8)]
    stubs = [pb_grpc.LayerServiceStub(c) for c in channels]
    tally, canceller = Tally(), Canceller()
    slots = threading.Semaphore(args.concurrency)
    pending = set()
    pending_lock = threading.Lock()

    rss = {"start": server.rss_mib()}
    rss_samples = []
    print(f"soak: {args.concurrency} in flight for {args.duration:.0f} s "
          f"(at most {args.max_requests} calls) against {server.target}, "
          f"server pid {server.proc.pid} on {server.allocator}, "
          f"VmRSS {rss['start']:.1f} MiB at start", flush=True)

    def finished(future, kind, method, expected, check):
        code = future.code().name if future.code() is not None else "CANCELLED"
        good_answer = None
        if kind == "good" and code == "OK":
            try:
                good_answer = bool(check(future.result()))
            except Exception:  # A malformed answer is a wrong one.
                good_answer = False
        tally.record(kind, method, code, expected, good_answer)
        with pending_lock:
            pending.discard(future)
        slots.release()

    start = time.monotonic()
    end = start + args.duration
    window = args.duration / 2 if args.rss_window is None else args.rss_window
    window_taken = False
    next_sample = start + 1
    sent = 0
    while sent < args.max_requests and time.monotonic() < end:
        slots.acquire()
        now = time.monotonic()
        if now >= next_sample:
            rss_samples.append((now - start, server.rss_mib(), server.status("Threads")))
            next_sample += 1
        if not window_taken and now >= end - window:
            rss["window"], window_taken = server.rss_mib(), True
        roll = picker.random()
        timeout = args.call_timeout
        if roll < 0.10:
            method, request, code = picker.choice(workload.bad)
            kind, expected, check = "bad", {code}, None
        else:
            method, request, check = picker.choice(workload.good)
            kind = "good"
            if roll < 0.15:
                kind = "cancelled"
            elif roll < 0.20:
                kind, timeout = "short_deadline", picker.uniform(0.001, 0.005)
            expected = ALLOWED[kind]
        future = getattr(picker.choice(stubs), method).future(request, timeout=timeout)
        with pending_lock:
            pending.add(future)
        if kind == "cancelled":
            canceller.cancel_at(time.monotonic() + picker.uniform(0, 0.005), future)
        future.add_done_callback(
            lambda f, k=kind, m=method, e=expected, c=check: finished(f, k, m, e, c))
        sent += 1
    load_seconds = time.monotonic() - start
    if not window_taken:
        rss["window"] = server.rss_mib()

    # Every call has a deadline, so each ends; wait a little past the longest.
    drain_deadline = time.monotonic() + args.call_timeout + 30
    while time.monotonic() < drain_deadline:
        with pending_lock:
            if not pending:
                break
        time.sleep(0.05)
    with pending_lock:
        never = len(pending)
    rss["end"] = server.rss_mib()
    server_inflight = server.samples("layerserve_inflight_requests")[""]
    server_queued = server.samples("layerserve_queue_depth")[""]
    server_codes = {}
    for labels, value in server.samples("layerserve_requests_total").items():
        code = re.search(r'code="(\w+)"', labels).group(1)
        server_codes[code] = server_codes.get(code, 0) + int(value)
    for channel in channels:
        channel.close()
    server.proc.send_signal(signal.SIGTERM)
    exit_code = server.proc.wait(timeout=120)

    answered = sum(tally.answered.values())
    unanswered = tally.unanswered + never
    client_codes = tally.by_code()
    print(f"\nsent {sent} calls in {load_seconds:.1f} s ({sent / load_seconds:.0f}/s); "
          f"answered {answered}; unanswered {unanswered}")
    print("\n| kind | calls | answered by code |\n|---|---:|---|")
    for kind in ["good", "bad", "cancelled", "short_deadline"]:
        codes = tally.by_code({kind})
        print(f"| {kind} | {sum(codes.values())} | "
              + ", ".join(f"{c} {n}" for c, n in sorted(codes.items())) + " |")
    # The server exports every code it can answer at 0: print those it did.
    print("\nserver requests_total by code: "
          + ", ".join(f"{c} {n}" for c, n in sorted(server_codes.items()) if n))
    growth = rss["end"] - rss["window"]
    print(f"\nVmRSS MiB: start {rss['start']:.1f}, {window:.0f} s before the end "
          f"{rss['window']:.1f}, end {rss['end']:.1f} (last {window:.0f} s {growth:+.1f}; "
          f"bound {args.max_rss_growth_mib:+.1f})")
    tail = [(t, m) for t, m, _ in rss_samples if t >= load_seconds - window]
    if len(tail) >= 2:
        # A trend, where the end-minus-start difference also sees where in its
        # sawtooth (jemalloc purges freed pages after 10 s) each end fell.
        slope = np.polyfit([t for t, _ in tail], [m for _, m in tail], 1)[0] * 60
        print(f"VmRSS trend over the last {window:.0f} s (least squares): "
              f"{slope:+.2f} MiB/min")
    if rss_samples:
        step = max(1, len(rss_samples) // 10)
        print("VmRSS MiB (threads) over time: " + ", ".join(
            f"{t:.0f}s {m:.0f} ({n})" for t, m, n in rss_samples[::step] + rss_samples[-1:]))

    failures = []
    if unanswered:
        failures.append(f"{unanswered} calls unanswered")
    if tally.unexpected_count:
        failures.append(f"{tally.unexpected_count} unexpected codes, e.g. {tally.unexpected}")
    if tally.wrong:
        failures.append(f"{tally.wrong} good calls answered OK with a wrong result")
    if server_inflight or server_queued:
        failures.append(f"server still has {server_inflight} in flight, {server_queued} queued")
    # The server saw every refused bad call and answered it as the client heard; it
    # answered OK at least what the clients got OK (cancelled and short-deadline calls
    # can be computed after the client gave up); and no more calls than were sent.
    for code in ["INVALID_ARGUMENT", "NOT_FOUND", "OUT_OF_RANGE", "RESOURCE_EXHAUSTED"]:
        if server_codes.get(code, 0) != client_codes.get(code, 0):
            failures.append(f"server counted {server_codes.get(code, 0)} {code}, "
                            f"clients got {client_codes.get(code, 0)}")
    if server_codes.get("OK", 0) < client_codes.get("OK", 0):
        failures.append("server counted fewer OK than clients got")
    if sum(server_codes.values()) > sent:
        failures.append("server counted more calls than were sent")
    if growth > args.max_rss_growth_mib:
        failures.append(f"VmRSS grew {growth:.1f} MiB in the last {window:.0f} s")
    if args.expect_allocator and not server.allocator.startswith(args.expect_allocator):
        failures.append(f"server runs on {server.allocator}, not {args.expect_allocator}")
    if exit_code != 0:
        failures.append(f"server exited {exit_code} on SIGTERM")
    if failures:
        print("\nsoak: FAIL: " + "; ".join(failures))
        return 1
    print("\nsoak: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
