#!/usr/bin/python3
"""How soon a worker is free again when the call it computes is given up (a
call cancelled or past its deadline while it computes): a 512-token BlockForward
through the demo model's 4 layers (or, with
--llama8b, through 4 Llama-3-8B-shaped layers of bfloat16 weights, written to a
temporary directory by bench/llama8b_bench.py), on a server with one compute thread, whose client deadline passes at 40% of the call's time
(in its second layer); at that moment a second client sends a 1-token call, which
can only run once the worker is free.

Reported (medians of --runs): the whole call's time, one layer's time (a quarter
of it), and how long after the first call's deadline the second call was
answered. With the call stopped between layers the wait is at most what was left
of the layer it was in, plus the small call; without, it is what was left of the
whole call.

Usage: /usr/bin/python3 bench/cancellation_bench.py [BUILD_DIR] [--runs 7] [--llama8b]
"""
import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

import grpc
import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
from sessions_bench import start_server  # noqa: E402  (beside this file)

LAYERS, TOKENS, DEMO_HIDDEN = 4, 512, 512  # The demo model's layers and hidden size.


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"))
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--llama8b", action="store_true",
                        help="4 layers of the 8B shape instead of the demo model")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cancellation_bench.") as repository:
        if args.llama8b:
            import llama8b_bench  # Beside this file; needs torch for the weights.
            model, flags = llama8b_bench.write_repository(repository, LAYERS)
            measure(args, model, llama8b_bench.HIDDEN, flags)
        else:
            measure(args, "", DEMO_HIDDEN, [])


def measure(args, model, hidden, flags):
    """The runs against a server started with `flags`, on `model` ("" = default)."""
    from layerserve.v1 import layerserve_pb2 as pb
    from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
    from wire import array_tensor

    proc, target = start_server(args.build, "--compute-threads=1", *flags)
    try:
        rng = np.random.default_rng(0)
        long_call = pb.BlockForwardRequest(
            model=model, num_layers=LAYERS, hidden_states=array_tensor(
                rng.standard_normal((1, TOKENS, hidden)).astype(np.float32), "float32"))
        short_call = pb.BlockForwardRequest(model=model, hidden_states=array_tensor(
            rng.standard_normal((1, 1, hidden)).astype(np.float32), "float32"))
        channels = [grpc.insecure_channel(target, options=[
            ("grpc.max_receive_message_length", 64 << 20)]) for _ in range(2)]
        first, second = (pb_grpc.LayerServiceStub(c) for c in channels)
        for _ in range(2):  # Warm-up: primitives, pages.
            first.BlockForward(long_call, timeout=120)
            second.BlockForward(short_call, timeout=60)
        wholes, waits = [], []
        for _ in range(args.runs):
            start = time.monotonic()
            first.BlockForward(long_call, timeout=120)
            whole = time.monotonic() - start
            wholes.append(whole)
            deadline = 0.4 * whole
            given_up = threading.Event()
            sent = []

            def give_up():
                try:
                    sent.append(time.monotonic())
                    first.BlockForward(long_call, timeout=deadline)
                except grpc.RpcError as error:
                    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
                given_up.set()

            caller = threading.Thread(target=give_up)
            caller.start()
            given_up.wait()
            second.BlockForward(short_call, timeout=60)
            # From the deadline itself (the client notices it a little later).
            waits.append(time.monotonic() - (sent[0] + deadline))
            caller.join()
        whole = statistics.median(wholes)
        wait = statistics.median(waits)
        layer = whole / LAYERS
        print(f"runs: {args.runs}; whole call: {whole * 1e3:.1f} ms; one layer: "
              f"{layer * 1e3:.1f} ms; the next call answered {wait * 1e3:.1f} ms after the "
              f"deadline = {wait / layer:.2f} layers (without stopping: up to "
              f"{0.6 * whole / layer:.1f} layers)")
        for c in channels:
            c.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
