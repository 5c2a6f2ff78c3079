#!/usr/bin/python3
"""What the Open Inference Protocol costs over layerserve.v1: ModelInfer with raw
contents against BlockForward, end to end through Python's gRPC stubs, on the demo
model and on a one-layer Llama-3-8B-shaped model (hidden 4096, 32/8 heads, d_ff
14336, bf16 weights, 436 MB), at T = 1 and T = 512 tokens.

Both calls carry the same float32 hidden states [1, T, H] and get the same answer
(checked bit for bit first). They alternate call by call on one channel (v1 first on
even rounds, ModelInfer first on odd ones), so drift and noise of this shared
machine fall on both alike; the report gives each one's median and the ratio of
medians ModelInfer / BlockForward (the target: at most 1.05).

Usage (from anywhere; Debian's interpreter has torch, numpy and grpc):
  /usr/bin/python3 bench/open_inference_bench.py [--quick] [--no-8b] [--out FILE]
      [--build-dir build]
--quick: fewer rounds (a smoke run). The 8B checkpoint is written to a temporary
directory (about 440 MB) and removed after.
"""
import argparse
import datetime
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))

# (tokens, rounds, quick rounds) per model: 2-15 s per case at full length. A
# demo step is 0.4 ms, where 20 µs of noise is 5%: it takes the most rounds.
CASES = {
    "demo": [(1, 1500, 40), (512, 200, 20)],
    "8b": [(1, 120, 12), (512, 16, 3)],
}


def cpu_name():
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if ":" in line:
                key, value = (s.strip() for s in line.split(":", 1))
                fields.setdefault(key, value)
    flags = fields.get("flags", "").split()
    isa = "AMX" if "amx_tile" in flags else ("AVX-512 bf16, no AMX"
                                             if "avx512_bf16" in flags else "no AVX-512 bf16")
    return (f"{fields.get('model name', 'unknown CPU')} (family {fields.get('cpu family')}, "
            f"model {fields.get('model')}; {isa}), {os.cpu_count()} CPUs")


def requests(model, tokens, hidden):
    from inference import grpc_service_pb2 as oip
    from layerserve.v1 import layerserve_pb2 as v1
    x = np.random.default_rng(tokens).standard_normal((1, tokens, hidden)).astype(np.float32)
    data = x.tobytes()
    block = v1.BlockForwardRequest(
        model=model, hidden_states=v1.Tensor(shape=x.shape, dtype=v1.FLOAT32, data=data))
    infer = oip.ModelInferRequest(model_name=model)
    tensor = infer.inputs.add(name="hidden_states", datatype="FP32")
    tensor.shape.extend(x.shape)
    infer.raw_input_contents.append(data)
    return block, infer


def measure(target, model, hidden, tokens, rounds):
    """Median seconds of BlockForward and of ModelInfer, alternating."""
    import grpc
    from inference import grpc_service_pb2_grpc as oip_grpc
    from layerserve.v1 import layerserve_pb2_grpc as v1_grpc
    options = [("grpc.max_send_message_length", 256 << 20),
               ("grpc.max_receive_message_length", 256 << 20)]
    with grpc.insecure_channel(target, options=options) as channel:
        v1_stub = v1_grpc.LayerServiceStub(channel)
        oip_stub = oip_grpc.GRPCInferenceServiceStub(channel)
        block, infer = requests(model, tokens, hidden)
        first_v1 = v1_stub.BlockForward(block, timeout=300)
        first_oip = oip_stub.ModelInfer(infer, timeout=300)
        if first_v1.hidden_states.data != first_oip.raw_output_contents[0]:
            sys.exit(f"open_inference_bench: {model} T={tokens}: the two answers differ")
        for _ in range(2):  # Warm-up.
            v1_stub.BlockForward(block, timeout=300)
            oip_stub.ModelInfer(infer, timeout=300)
        times = {"v1": [], "oip": []}
        calls = {"v1": lambda: v1_stub.BlockForward(block, timeout=300),
                 "oip": lambda: oip_stub.ModelInfer(infer, timeout=300)}
        for i in range(rounds):
            for name in (("v1", "oip") if i % 2 == 0 else ("oip", "v1")):
                start = time.perf_counter()
                calls[name]()
                times[name].append(time.perf_counter() - start)
    return statistics.median(times["v1"]), statistics.median(times["oip"])


def serve(build, *args):
    import server_process
    server_process.SERVER = os.path.join(build, "bin", "layerserve")
    return server_process.ServerProcess(*args)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-8b", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build_dir, "python"))
    started = time.time()
    load_start = os.getloadavg()[0]
    rows = []
    models = [("demo", 512, [])]
    tmp = None
    if not args.no_8b:
        import llama8b_bench  # Beside this file: the same checkpoint as that bench's.
        tmp = tempfile.TemporaryDirectory(prefix="oip-bench-")
        name, flags = llama8b_bench.write_repository(tmp.name)
        models.append((name, llama8b_bench.HIDDEN, flags))
    try:
        for model, hidden, flags in models:
            server = serve(args.build_dir, *flags)
            try:
                for tokens, rounds, quick_rounds in CASES["demo" if model == "demo" else "8b"]:
                    n = quick_rounds if args.quick else rounds
                    v1_s, oip_s = measure(server.target, model, hidden, tokens, n)
                    rows.append((model, tokens, n, v1_s, oip_s))
                    print(f"{model} T={tokens}: BlockForward {v1_s * 1e3:.2f} ms, "
                          f"ModelInfer {oip_s * 1e3:.2f} ms, ratio {oip_s / v1_s:.3f}",
                          flush=True)
            finally:
                if server.stop() != 0:
                    sys.exit(f"open_inference_bench: the server failed:\n{server.output()}")
    finally:
        if tmp is not None:
            tmp.cleanup()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    lines = [
        "| model | T | rounds | BlockForward median | ModelInfer median | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for model, tokens, n, v1_s, oip_s in rows:
        lines.append(f"| {model} | {tokens} | {n} | {v1_s * 1e3:.2f} ms | "
                     f"{oip_s * 1e3:.2f} ms | {oip_s / v1_s:.3f} |")
    report = "\n".join([
        f"Machine: {cpu_name()}; "
        f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}, commit {commit}; "
        f"load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
        f"{time.time() - started:.0f} s.",
        "Command: `" + " ".join(["/usr/bin/python3 bench/open_inference_bench.py",
                                 *map(shlex.quote, sys.argv[1:])]) + "`",
        "",
        *lines,
    ])
    print()
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
