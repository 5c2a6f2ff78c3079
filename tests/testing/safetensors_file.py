"""Writes safetensors files as Hugging Face's library does: an 8-byte little-endian
header length, a JSON header naming each tensor's dtype, shape and byte range,
padded with spaces to 8 bytes, then the raw data. Shared by the golden models
(tests/golden/make_block_golden.py), the random test models (random_llama.py) and
the benchmarks' checkpoints (bench/llama8b_bench.py)."""
import json


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype string, shape, raw bytes), in file order."""
    header, offset = {}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)
