#!/usr/bin/python3
"""How far block outputs with bfloat16 and int8 weights are from float32 weights,
through the real server (so that the accuracy of each dtype is stated, not hidden).

  1. every golden architecture (tests/golden/models): each case of
     tests/golden/block_golden.json sent as FLOAT32 to one server per weight format,
     compared with the case's expected output (PyTorch, float32 weights);
  2. with --llama8b, one Llama-3-8B-shaped layer (hidden 4096, 32/8 heads, d_ff
     14336) with float32 weights N(0, 0.02^2) (a 1.7 GB checkpoint in a temporary
     directory): a T = 16 call on each server against the float32-weights server.

Per architecture and format: max relative error = max |got - want| / RMS(want) and
relative RMS error = RMS(got - want) / RMS(want), over all the architecture's cases
(padded rows excluded). Formats: float32, bfloat16, int8 at each --groups size.

Usage: /usr/bin/python3 bench/weight_accuracy.py [--groups 32,64,128,0] [--llama8b]
           [--build-dir build]
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
sys.path.insert(0, os.path.dirname(__file__))


def formats(groups):
    out = [("float32", []), ("bfloat16", [])]
    out += [(f"int8/g{g}", ["--weight-dtype=int8", f"--weight-group-size={g}"])
             for g in groups]
    return out


def flags(name, extra):
    return extra if name.startswith("int8") else [f"--weight-dtype={name}"]


def errors(got, want):
    scale = np.sqrt(np.mean(want ** 2))
    diff = got - want
    return float(np.max(np.abs(diff)) / scale), float(np.sqrt(np.mean(diff ** 2)) / scale)


def golden(groups):
    import server_process
    from layerserve.v1 import layerserve_pb2 as pb
    from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
    import grpc
    from wire import tensor, values
    with open(os.path.join(ROOT, "tests", "golden", "block_golden.json")) as f:
        data = json.load(f)
    models = os.path.join(ROOT, "tests", "golden", "models")
    table = {}
    for name, extra in formats(groups):
        process = server_process.ServerProcess(f"--model-repository={models}",
                                               *flags(name, extra))
        stub = pb_grpc.LayerServiceStub(grpc.insecure_channel(process.target))
        got, want = {}, {}
        for case in data["cases"]:
            r = pb.BlockForwardRequest(
                model=case["model"], layer_start=case["layer_start"],
                num_layers=case["num_layers"],
                hidden_states=tensor(case["hidden_states"], case["shape"], "float32"),
                position_offset=case["position_offset"], positions=case["positions"],
                sequence_lengths=case["sequence_lengths"])
            if case["causal"] is not None:
                r.causal = case["causal"]
            out = values(stub.BlockForward(r, timeout=120).hidden_states)
            expected = np.asarray(case["expected"], dtype=np.float64)
            real = expected != 0  # Padded rows are exact zeros on both sides.
            got.setdefault(case["model"], []).append(out[real])
            want.setdefault(case["model"], []).append(expected[real])
        process.stop()
        for model in got:
            table.setdefault(model, {})[name] = errors(np.concatenate(got[model]),
                                                       np.concatenate(want[model]))
    return table


def llama8b(groups):
    import torch
    import server_process
    from layerserve_client import Client
    from safetensors_file import write_safetensors
    import llama8b_bench as l8
    weights = {k: v.float() for k, v in l8.make_weights().items()}
    g = torch.Generator().manual_seed(23)
    for k in weights:  # Float32 weights, not bfloat16-representable ones.
        if k.endswith("proj.weight"):
            weights[k] = torch.randn(weights[k].shape, generator=g) * 0.02
    with tempfile.TemporaryDirectory() as repo:
        directory = os.path.join(repo, l8.MODEL)
        l8.write_checkpoint(directory, {})
        write_safetensors(os.path.join(directory, "model.safetensors"), [
            (name, "F32", list(t.shape), t.numpy().astype("<f4").tobytes())
            for name, t in weights.items()])
        x = np.random.default_rng(16).standard_normal((16, l8.HIDDEN), dtype=np.float32)
        outputs = {}
        for name, extra in formats(groups):
            process = server_process.ServerProcess(f"--model-repository={repo}",
                                                   *flags(name, extra))
            with Client(process.target, timeout=600) as client:
                outputs[name] = client.block_forward(x, model=l8.MODEL).astype(np.float64)
            process.stop()
    return {name: errors(out, outputs["float32"]) for name, out in outputs.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", default="32,64,128,0")
    parser.add_argument("--llama8b", action="store_true")
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()
    sys.path[:0] = [os.path.join(ROOT, "client", "python"),
                    os.path.join(args.build_dir, "python")]
    import server_process
    server_process.SERVER = os.path.join(args.build_dir, "bin", "layerserve")
    groups = [int(g) for g in args.groups.split(",")]
    table = golden(groups)
    if args.llama8b:
        table["llama3-8b-shaped layer (T=16)"] = llama8b(groups)
    names = [n for n, _ in formats(groups)]
    print("| architecture | " + " | ".join(f"{n} max / RMS" for n in names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for model, row in table.items():
        cells = [f"{row[n][0]:.2e} / {row[n][1]:.2e}" for n in names]
        print(f"| {model} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
