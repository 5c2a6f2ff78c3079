"""A deeper copy of a tiny golden checkpoint, for the tests that split a model into
layer spans (--layers) and need more layers than the goldens' 2-3.

    write_deep_copy(SOURCE_DIR / "tests/golden/models/tiny-qwen2", out_dir, layers=8)

Layer i is the golden's layer i mod L with every weight multiplied by its own
random factor in [0.75, 1.25] (seeded), so no two layers are equal and a layer
served in the wrong place changes the numbers; tensors outside the layers
(embeddings, final norm) are copied. Everything is written as float32 into one
model.safetensors, so servers with float32 weights hold exactly these values.
"""
import json
import os
import re

import numpy as np

from safetensors_file import write_safetensors

_LAYER = re.compile(r"^(.*?(?:layers|h)\.)(\d+)\.(.+)$")
_BF16_OR_F16 = {"BF16", "F16"}


def _read_tensors(directory):
    """{name: float32 array} of a checkpoint directory (one file or shards)."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        with open(os.path.join(directory, name), "rb") as f:
            raw = f.read()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        data = raw[8 + n:]
        for tensor, entry in header.items():
            if tensor == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            chunk = data[begin:end]
            if entry["dtype"] == "F32":
                values = np.frombuffer(chunk, "<f4")
            elif entry["dtype"] == "BF16":
                values = (np.frombuffer(chunk, "<u2").astype(np.uint32) << 16).view(np.float32)
            elif entry["dtype"] == "F16":
                values = np.frombuffer(chunk, "<f2").astype(np.float32)
            else:
                raise ValueError(f"{name}: {tensor}: dtype {entry['dtype']}")
            tensors[tensor] = values.reshape(entry["shape"])
    return tensors


def write_deep_copy(golden_dir, directory, layers=8, seed=0, max_positions=None):
    """Writes config.json and model.safetensors of a `layers`-layer copy of the
    checkpoint in `golden_dir` into `directory` (created). max_positions: a longer
    context than the golden's (tiny-gpt2 has 16), for longer sessions. Returns the
    directory."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(golden_dir, "config.json")) as f:
        config = json.load(f)
    depth_key = "n_layer" if "n_layer" in config else "num_hidden_layers"
    golden_layers = config[depth_key]
    config[depth_key] = layers
    config["torch_dtype"] = "float32"
    if max_positions is not None:
        for key in ("max_position_embeddings", "n_positions", "n_ctx"):
            if key in config:
                config[key] = max(config[key], max_positions)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    rng = np.random.default_rng(seed)
    source = _read_tensors(golden_dir)
    out = []
    for name, values in source.items():
        m = _LAYER.match(name)
        if m is None:
            out.append((name, values))
            continue
        prefix, layer, rest = m.group(1), int(m.group(2)), m.group(3)
        # Each golden layer L fans out to layers L, L + golden_layers, ...
        for i in range(layer, layers, golden_layers):
            factor = rng.uniform(0.75, 1.25, values.shape).astype(np.float32)
            out.append((f"{prefix}{i}.{rest}", values * factor))
    out.sort(key=lambda item: _sort_key(item[0]))
    write_safetensors(os.path.join(directory, "model.safetensors"),
                      [(name, "F32", v.shape, np.ascontiguousarray(v, "<f4").tobytes())
                       for name, v in out])
    return directory


def _sort_key(name):
    """Layers in numeric order (each layer's tensors together), others last: a span's
    tensors are then one contiguous range of the file."""
    m = _LAYER.match(name)
    return (0, int(m.group(2)), m.group(3)) if m else (1, 0, name)
