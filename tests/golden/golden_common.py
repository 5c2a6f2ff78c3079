"""What the golden-file generators (tests/golden/make_*_golden.py) share: rounding
to bfloat16, writing float32 values as JSON numbers, seeding, the document header
and writing the JSON, and the command line, whose --check mode holds the committed
files to their generator. (Hugging Face's RoPE frequencies, which two generators
use, are in hf_rope.py.)

Each generator defines generate(out_dir), which writes its files (the JSON, and for
make_block_golden.py the checkpoints under models/) below out_dir under the names
they are committed with, and ends with

    golden_common.main(generate, ["norm_golden.json"])

Then, with Debian's interpreter (the one that has torch):

    /usr/bin/python3 tests/golden/make_norm_golden.py           # rewrites the files
    /usr/bin/python3 tests/golden/make_norm_golden.py --check   # compares, writes nothing

--check runs the generator whole (every case: a generator takes about 0.1 s after
the 0.8 s of importing torch) into a temporary directory and compares what it
wrote with the committed files, exiting 1 on any difference and listing the first
ones:
  - files: the same set under each output directory, and every file that is not
    JSON (the safetensors checkpoints, for instance) the same bytes;
  - JSON: the same bytes; if not, the differences are listed value by value
    (keys, list lengths, types, strings, integers, booleans, nulls,
    "nan"/"inf"/"-inf", and floats as float32, with their distance in ulps).
No tolerance: the generators are deterministic. They are seeded, and every float
in the files (random inputs as well as PyTorch's outputs) comes from torch float32
ops whose code depends only on the torch build and the CPU capability its ATen
kernels dispatch to, which Debian's torch 1.13 sets to AVX2 on every x86-64 CPU
that has AVX2, AVX-512 ones included; its BLAS is netlib's reference one. Thread
counts do not matter (measured: OMP_NUM_THREADS=1 and 2 give the same bytes). So a
committed file edited by hand fails the check, down to one ulp of one value.

At another capability the regenerated numbers differ, and no tolerance would keep
the check meaningful (measured: with ATEN_CPU_CAPABILITY=avx512 PyTorch's outputs
move by up to 1.4e-6 relative; without AVX even the random inputs move, by a
bfloat16 ulp): --check then exits 77, which ctest reports as skipped, naming the
capability. A new torch (the files record "torch_version") means regenerating the
files with it, and committing them.
"""

import argparse
import json
import math
import os
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def bf16_exact(t):
    """Rounds a float32 tensor to the nearest bfloat16 values, kept as float32."""
    return t.to(torch.bfloat16).to(torch.float32)


def short_float(v, nonfinite=True):
    """float32 v as JSON: the shortest decimal that, read as a double and then
    rounded to float32, gives back exactly v (checked here for every value).
    NaN, +Inf and -Inf are the strings "nan", "inf" and "-inf" (JSON has no
    numbers for them; tests/golden/golden_json.cc reads them), or, with
    nonfinite=False, a ValueError."""
    f32 = np.float32(v)
    if not np.isfinite(f32):
        if not nonfinite:
            raise ValueError(f"non-finite value {v} cannot go into JSON")
        if np.isnan(f32):
            return "nan"
        return "inf" if f32 > 0 else "-inf"
    d = float(str(f32))  # numpy prints the shortest string that identifies a float32
    if np.float32(d) != f32:
        # Double rounding (decimal -> double -> float32) can in principle cross a
        # float32 midpoint; fall back to the exact double value.
        d = float(f32)
    assert np.float32(d).tobytes() == f32.tobytes(), (v, d)
    return d


def floats(t, nonfinite=True):
    """A tensor as a flat list of short_float values; None stays None."""
    if t is None:
        return None
    return [short_float(v, nonfinite) for v in t.reshape(-1).tolist()]


def write_json(path, doc):
    """Compact, one line, a final newline; never a bare NaN or Infinity."""
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"), allow_nan=False)
        f.write("\n")


def seeded_generator(seed):
    """A torch.Generator of this seed, for the random inputs; torch's global
    generator is seeded too, for any draw that does not name one."""
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def golden_doc(script, seed, sections):
    """A golden file's document: who wrote it, with which torch and seed, then its
    sections (a dict, in the order they are to appear)."""
    doc = {
        "generator": f"tests/golden/{script}",
        "torch_version": torch.__version__,
        "seed": seed,
    }
    doc.update(sections)
    return doc


def write_golden(out_dir, name, doc):
    """Writes doc as out_dir/name and says so, with the length of each list in it."""
    out = os.path.join(out_dir, name)
    write_json(out, doc)
    counts = ", ".join(f"{len(v)} {k}" for k, v in doc.items() if isinstance(v, list))
    print(f"wrote {out}: {counts}, {os.path.getsize(out)} bytes")


# ---------------------------------------------------------------------------------
# --check
# ---------------------------------------------------------------------------------

MAX_REPORTED = 10


def _float32(v):
    return np.float32(v).tobytes()


def _ulps(a, b):
    """Distance in float32 ulps between two finite float32 values."""
    def ordered(x):
        i = int(np.frombuffer(np.float32(x).tobytes(), np.int32)[0])
        return i if i >= 0 else -(i & 0x7FFFFFFF)
    return abs(ordered(a) - ordered(b))


def compare_json(committed, regenerated, where, diffs):
    """Appends (path, committed, regenerated, note) for every difference."""
    if isinstance(committed, dict) and isinstance(regenerated, dict):
        for key in committed.keys() | regenerated.keys():
            if key not in regenerated:
                diffs.append((f"{where}.{key}", committed[key], "<missing>", ""))
            elif key not in committed:
                diffs.append((f"{where}.{key}", "<missing>", regenerated[key], ""))
            else:
                compare_json(committed[key], regenerated[key], f"{where}.{key}", diffs)
        return
    if isinstance(committed, list) and isinstance(regenerated, list):
        if len(committed) != len(regenerated):
            diffs.append((where, f"{len(committed)} entries", f"{len(regenerated)} entries",
                          ""))
            return
        for i, (c, r) in enumerate(zip(committed, regenerated)):
            compare_json(c, r, f"{where}[{i}]", diffs)
        return
    # JSON has one number type: 1 and 1.0 are the same value (bool is not a number).
    numbers = (int, float)
    if (isinstance(committed, numbers) and isinstance(regenerated, numbers) and
            not isinstance(committed, bool) and not isinstance(regenerated, bool)):
        if isinstance(committed, int) and isinstance(regenerated, int):
            if committed != regenerated:
                diffs.append((where, committed, regenerated, ""))
        elif _float32(committed) != _float32(regenerated) or committed != regenerated:
            note = ""
            if math.isfinite(committed) and math.isfinite(regenerated):
                note = f"({_ulps(committed, regenerated)} float32 ulps apart)"
            diffs.append((where, committed, regenerated, note))
        return
    if type(committed) is not type(regenerated) or committed != regenerated:
        diffs.append((where, committed, regenerated, ""))


def _files(root):
    found = set()
    for d, _, names in os.walk(root):
        for n in names:
            found.add(os.path.relpath(os.path.join(d, n), root))
    return found


def compare_output(name, committed_root, regenerated_root):
    """Differences between one committed output (file or directory) and its
    regeneration, as a list of strings."""
    committed = os.path.join(committed_root, name)
    regenerated = os.path.join(regenerated_root, name)
    if os.path.isdir(regenerated):
        if not os.path.isdir(committed):
            return [f"{name}/: not committed"]
        c_files, r_files = _files(committed), _files(regenerated)
        problems = [f"{name}/{f}: committed, but the generator does not write it"
                    for f in sorted(c_files - r_files)]
        problems += [f"{name}/{f}: written by the generator, not committed"
                     for f in sorted(r_files - c_files)]
        for f in sorted(c_files & r_files):
            problems += compare_output(os.path.join(name, f), committed_root,
                                       regenerated_root)
        return problems
    if not os.path.isfile(committed):
        return [f"{name}: not committed"]
    if not name.endswith(".json"):
        with open(committed, "rb") as c, open(regenerated, "rb") as r:
            if c.read() != r.read():
                return [f"{name}: the committed bytes differ from the generator's"]
        return []
    with open(committed, "rb") as c, open(regenerated, "rb") as r:
        c_bytes, r_bytes = c.read(), r.read()
    if c_bytes == r_bytes:
        return []
    try:
        c_doc = json.loads(c_bytes)
    except ValueError as e:
        return [f"{name}: the committed file is not valid JSON: {e}"]
    diffs = []
    compare_json(c_doc, json.loads(r_bytes), "", diffs)
    if not diffs:
        # Same values, other bytes (spacing, number spelling, key order): the file
        # was not written by the generator.
        return [f"{name}: the same values, but not the bytes the generator writes "
                "(formatting or number spelling edited)"]
    lines = [f"{name}: {len(diffs)} value(s) differ"]
    for path, c, r, note in diffs[:MAX_REPORTED]:
        lines.append(f"  {path or '<root>'}: committed {_short(c)}, generator {_short(r)} "
                     f"{note}".rstrip())
    if len(diffs) > MAX_REPORTED:
        lines.append(f"  ... and {len(diffs) - MAX_REPORTED} more")
    return lines


def _short(v):
    text = json.dumps(v)
    return text if len(text) <= 80 else text[:77] + "..."


# The capability of torch's CPU kernels that the committed files were made with.
EXPECTED_CPU_CAPABILITY = "AVX2"
SKIP = 77  # ctest's SKIP_RETURN_CODE in tests/golden/CMakeLists.txt.


def cpu_capability():
    """What torch 1.13 reports as "CPU capability usage" (AVX2, AVX512, NO AVX)."""
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            return line.split(":", 1)[1].strip()
    return "unknown"


def check(generate, outputs, script):
    capability = cpu_capability()
    if capability != EXPECTED_CPU_CAPABILITY:
        print(f"{script} --check: skipped: torch runs its CPU kernels at capability "
              f"{capability}, the committed files were made at "
              f"{EXPECTED_CPU_CAPABILITY}, and numbers differ between them "
              "(see golden_common.py; is ATEN_CPU_CAPABILITY set?)")
        return SKIP
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="golden-check-") as tmp:
        generate(tmp)
        problems = []
        for name in outputs:
            problems += compare_output(name, HERE, tmp)
    elapsed = time.monotonic() - start
    if problems:
        print(f"{script} --check: FAILED in {elapsed:.1f} s: the committed files are not "
              f"what the generator writes (torch {torch.__version__}):")
        for line in problems:
            print("  " + line)
        print(f"If the generator changed on purpose, rerun /usr/bin/python3 "
              f"tests/golden/{script} and commit the result; never edit the files by "
              "hand.")
        return 1
    print(f"{script} --check: {', '.join(outputs)} match the generator exactly "
          f"({elapsed:.1f} s, torch {torch.__version__})")
    return 0


def main(generate, outputs):
    """Command line of a generator: write its outputs in place, or --check them."""
    script = os.path.basename(sys.argv[0])
    parser = argparse.ArgumentParser(
        description=f"Writes {', '.join(outputs)} in tests/golden/, or checks them.")
    parser.add_argument("--check", action="store_true",
                        help="regenerate into a temporary directory and compare with the "
                        "committed files (exit 1 on any difference); writes nothing here")
    args = parser.parse_args()
    if args.check:
        sys.exit(check(generate, outputs, script))
    if cpu_capability() != EXPECTED_CPU_CAPABILITY:
        print(f"warning: torch runs its CPU kernels at capability {cpu_capability()}, not "
              f"{EXPECTED_CPU_CAPABILITY}: the files will differ in their last bits from "
              "what --check regenerates elsewhere", file=sys.stderr)
    generate(HERE)
