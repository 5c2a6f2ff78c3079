#!/usr/bin/python3
"""The first calls after start against the same calls once warm (the cost
that --warm-up moves before health says SERVING):
for the demo model (float32 and bfloat16 weights) or, with --llama8b, a one-layer
Llama-3-8B-shaped model (bfloat16 weights and KV cache, bench/llama8b_bench.py's
checkpoint, written to a temporary directory), with and without --warm-up.

Each configuration starts a fresh server, opens the connection (ListModels, so the
first call pays no connection set-up), then times, through the Python client, the
first and then 5 more BlockForward calls of 16, 128, 512 and 1 token(s) through all
the model's layers, and the first and 5 more decode steps of a session prefilled
with 8 tokens. Reported: first / median of the rest. Repeated --runs times (new
servers), medians.

Usage: /usr/bin/python3 bench/first_call_bench.py [BUILD_DIR] [--runs 3] [--llama8b]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
from sessions_bench import start_server  # noqa: E402  (beside this file)

TOKENS = (16, 128, 512, 1)


class Model:
    """What the bench serves: the server's flags, the model's name ("" = the
    default), hidden size and layers, and the weight types to measure."""

    def __init__(self, args, name, hidden, layers, dtypes):
        self.args, self.name, self.hidden, self.layers = args, name, hidden, layers
        self.dtypes = dtypes


DEMO = Model([], "", 512, 4, ("float32", "bfloat16"))


def llama8b(repository):
    import llama8b_bench  # Beside this file; needs torch for the weights.
    name, args = llama8b_bench.write_repository(repository)
    args = [a for a in args if not a.startswith("--weight-dtype=")]
    return Model(args, name, llama8b_bench.HIDDEN, 1, ("bfloat16",))


def timed(call, repeats=6):
    """(first, median of the rest) in ms."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return times[0], statistics.median(times[1:])


def one_server(build, model, args):
    from layerserve_client import Client
    proc, target = start_server(build, *model.args, *args)
    try:
        ratios = {}
        with Client(target, timeout=120, keep_freed_buffers=True) as client:
            client.list_models()
            for t in TOKENS:
                x = np.random.default_rng(t).standard_normal((t, model.hidden),
                                                             dtype=np.float32)
                first, warm = timed(lambda: client.block_forward(
                    x, model=model.name, num_layers=model.layers))
                ratios[f"BlockForward T={t}"] = (first, warm)
            with client.open_session(model=model.name, num_layers=model.layers) as session:
                session.forward(np.ones((8, model.hidden), np.float32))
                step = np.ones((1, model.hidden), np.float32)
                ratios["decode step"] = timed(lambda: session.forward(step))
        return ratios
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--llama8b", action="store_true",
                        help="the 8B-shaped one-layer model instead of the demo model")
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    with tempfile.TemporaryDirectory(prefix="first_call_bench.") as repository:
        model = llama8b(repository) if args.llama8b else DEMO
        print("| weights | warm-up | call | first ms | warm ms (median) | first / warm |")
        print("|---|---|---|---|---|---|")
        for dtype in model.dtypes:
            for warm_up in ("true", "false"):
                runs = [one_server(args.build, model, [f"--weight-dtype={dtype}",
                                                       f"--warm-up={warm_up}"])
                        for _ in range(args.runs)]
                for call in runs[0]:
                    first = statistics.median(r[call][0] for r in runs)
                    warm = statistics.median(r[call][1] for r in runs)
                    ratio = statistics.median(r[call][0] / r[call][1] for r in runs)
                    print(f"| {dtype} | {warm_up} | {call} | {first:.1f} | {warm:.1f} | "
                          f"{ratio:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
