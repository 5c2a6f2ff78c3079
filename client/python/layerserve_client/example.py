"""layerserve-client-example: the first run after installing the package.

    layerserve-client-example [--address HOST:PORT] [--steps N] [--timeout SECONDS]

Against a running layerserve (./scripts/serve listens on 127.0.0.1:50051) it lists
the models, runs one RMSNorm checked against numpy, then opens a KV-cache session
over every block of the default model, sends a 4-token prefill and N one-token
decode steps (random hidden states, standing in for token embeddings), checks the
session length after each, closes the session and prints one summary line. Any
error goes to stderr with a non-zero exit: 2 for a failed call, 1 for a wrong
answer. Session calls carry the x-layerserve-session header (Session does it), so
the example also runs through a balancer that routes sessions on it.
"""
import argparse
import statistics
import sys
import time
from typing import List, Optional

import numpy as np

from . import __version__
from .client import Client
from .errors import LayerServeError

PREFILL_TOKENS = 4


class WrongAnswer(Exception):
    """The server answered, but not what the example checks for."""


def run(client: Client, steps: int) -> str:
    """The example's calls; returns the summary line."""
    models = client.list_models()
    for m in models:
        print(f"model {m.name}: {m.architecture}, {m.num_layers} layers, hidden "
              f"{m.hidden_size}, {m.state}{' (default)' if m.is_default else ''}")

    # RMSNorm over the last dim of a [2, 8] batch, against the formula.
    x = np.sin(np.arange(1, 17, dtype=np.float32)).reshape(2, 8)
    y = client.normalize(x, "rms", epsilon=1e-6)
    want = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    error = float(np.max(np.abs(y - want)))
    print(f"normalize: RMSNorm of [2, 8], max |server - numpy| = {error:.2e}")
    if not error < 1e-5:  # Also catches a NaN.
        raise WrongAnswer(f"RMSNorm differs from numpy by {error}")

    model = client.get_model()  # The default model.
    rng = np.random.default_rng(0)
    step_ms: List[float] = []
    with client.open_session(model=model.name, num_layers=model.num_layers) as session:
        expect = PREFILL_TOKENS
        out = session.forward(rng.standard_normal((PREFILL_TOKENS, model.hidden_size),
                                                  dtype=np.float32))
        for step in range(steps + 1):  # The prefill, then the decode steps.
            if out.length != expect or out.hidden_states.shape[-1] != model.hidden_size:
                raise WrongAnswer(f"step {step}: session length {out.length}, shape "
                                  f"{list(out.hidden_states.shape)}; expected length "
                                  f"{expect}, hidden {model.hidden_size}")
            if not np.all(np.isfinite(out.hidden_states)):
                raise WrongAnswer(f"step {step}: non-finite hidden states")
            if step == steps:
                break
            start = time.perf_counter()
            out = session.forward(rng.standard_normal((1, model.hidden_size),
                                                      dtype=np.float32))
            step_ms.append((time.perf_counter() - start) * 1e3)
            expect += 1
        session.close()
    median = f", median step {statistics.median(step_ms):.1f} ms" if step_ms else ""
    return (f"ok: {len(models)} model(s), normalize checked, session on {model.name} "
            f"layers 0-{model.num_layers - 1}: prefill {PREFILL_TOKENS} tokens + {steps} "
            f"decode steps, length {expect}, closed{median} (layerserve-client "
            f"{__version__})")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="layerserve-client-example",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="127.0.0.1:50051",
                        help="the server, HOST:PORT (default %(default)s)")
    parser.add_argument("--steps", type=int, default=20,
                        help="decode steps after the prefill (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="deadline of each call in seconds (default %(default)s)")
    args = parser.parse_args(argv)
    if args.steps < 0:
        parser.error("--steps must be >= 0")
    try:
        with Client(args.address, timeout=args.timeout) as client:
            print(run(client, args.steps))
    except LayerServeError as error:
        print(f"error: {args.address}: {error}", file=sys.stderr)
        return 2
    except WrongAnswer as error:
        print(f"error: {args.address}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
