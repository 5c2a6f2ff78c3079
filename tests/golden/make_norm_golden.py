"""Writes tests/golden/norm_golden.json: LayerNorm and RMSNorm cases computed by PyTorch.

Run from anywhere with Debian's interpreter (the one that has torch):

    /usr/bin/python3 tests/golden/make_norm_golden.py [--check]

The output is committed; rerun only when the cases change. Seeded, so a rerun with
the same torch gives the same file; --check regenerates it in a temporary directory
and fails unless it equals the committed one (golden_common.py; ctest runs it as
golden_check_norm).

What PyTorch computes (float32 throughout):
  layer_norm  torch.nn.functional.layer_norm(x, [D], weight, bias, eps)
  rms_norm    x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w  (Llama),
              with w replaced by (1 + w) when weight_offset (Gemma).
  residual    s = x + residual is normalized instead of x; s is also expected back
              as expected_residual_out (the fused add + norm of inference engines).
  NaN, Inf    the *_nonfinite_* cases plant NaN and +-Inf in input or residual
              (NONFINITE below) and expect what these formulas give: a NaN makes its
              row all NaN; +-Inf makes a LayerNorm row all NaN, and in an RMSNorm row
              gives NaN at each Inf and +-0 elsewhere (rsqrt(+Inf) = 0).

Every input, weight, bias and residual value is exactly representable in bfloat16
(rounded through torch.bfloat16 here), so the same expected output serves a test
that sends the inputs as BFLOAT16. Tolerances for consumers of this file:
  FLOAT32 wire:   |got - expected| <= 1e-5 * max(1, |expected|)
  BFLOAT16 wire:  |got - expected| <= 2e-2 * max(1, |expected|)
  NaN expected:   got is NaN; +-Inf expected: got is the same infinity.
(the bfloat16 bound covers rounding the output to 8 significant bits, 2^-9 relative,
with margin; residual_out is bit-exact in float32.)

Numbers: each is written as the shortest decimal that, read as a double and then
rounded to float32, gives back the exact float32 value; the script checks this for
every number before writing. Non-finite values are the strings "nan", "inf" and
"-inf" (JSON has no numbers for them). Schema:
  {"generator", "torch_version", "seed", "cases": [{"name", "kind", "shape",
   "epsilon", "weight_offset", "input", "weight"|null, "bias"|null,
   "residual"|null, "expected", "expected_residual_out"|null}]}
Arrays are flat, row-major; shape's last entry is the normalized dimension.
"""


import torch
import torch.nn.functional as F

import golden_common
from golden_common import (bf16_exact, floats, golden_doc, seeded_generator, short_float,
                           write_golden)

SEED = 20240611
OUT = "norm_golden.json"

# Twenty small cases (the file stays near 320 KB): dims 1, 7, 33, 64, 128, 256, 768,
# 4097, batched [B, T, D] shapes, epsilon variants, weight/bias present or absent,
# rows holding NaN and +-Inf.
# name, kind, shape, epsilon, weight ("plain" | "offset" | None), bias, residual
CASES = [
    # dim 1 has zero variance, so y = bias exactly; PyTorch's float32 mean is off by
    # an ulp there, amplified by 1/sqrt(eps) (2.6e-5 at eps 1e-5). eps = 0.1 keeps
    # PyTorch's own error inside the FLOAT32 tolerance.
    ("layer_norm_d1_eps0.1", "layer_norm", [3, 1], 0.1, "plain", True, False),
    ("layer_norm_d7_no_affine", "layer_norm", [2, 7], 1e-5, None, False, False),
    ("layer_norm_d64_weight_eps1e-6", "layer_norm", [3, 64], 1e-6, "plain", False, False),
    ("layer_norm_bsd_2x3x64", "layer_norm", [2, 3, 64], 1e-5, "plain", True, False),
    ("layer_norm_d768", "layer_norm", [1, 768], 1e-5, "plain", True, False),
    ("layer_norm_d256_residual", "layer_norm", [1, 256], 1e-5, "plain", True, True),
    ("layer_norm_d4097_eps1e-12", "layer_norm", [1, 4097], 1e-12, None, False, False),
    ("rms_norm_d1", "rms_norm", [2, 1], 1e-6, "plain", False, False),
    ("rms_norm_d7_no_weight", "rms_norm", [3, 7], 1e-6, None, False, False),
    ("rms_norm_d64_gemma", "rms_norm", [2, 64], 1e-6, "offset", False, False),
    ("rms_norm_d768_eps1e-5", "rms_norm", [1, 768], 1e-5, "plain", False, False),
    ("rms_norm_d256_residual", "rms_norm", [2, 256], 1e-6, "plain", False, True),
    ("rms_norm_bsd_2x2x128_gemma_residual", "rms_norm", [2, 2, 128], 1e-6, "offset", False,
     True),
    ("rms_norm_d4097_no_weight", "rms_norm", [1, 4097], 1e-6, None, False, False),
    # NaN and Inf, planted after the random draw (see NONFINITE). Appended last, so
    # the cases above draw the same numbers as before.
    ("rms_norm_nonfinite_d7", "rms_norm", [6, 7], 1e-6, "plain", False, False),
    ("rms_norm_nonfinite_d7_no_weight", "rms_norm", [3, 7], 1e-6, None, False, False),
    ("rms_norm_nonfinite_d1", "rms_norm", [3, 1], 1e-6, "plain", False, False),
    ("rms_norm_nonfinite_2x3x33_gemma_residual", "rms_norm", [2, 3, 33], 1e-6, "offset",
     False, True),
    ("layer_norm_nonfinite_d7", "layer_norm", [4, 7], 1e-5, "plain", True, False),
    ("layer_norm_nonfinite_d33_residual", "layer_norm", [2, 33], 1e-5, "plain", True, True),
]

INF, NAN = float("inf"), float("nan")
BIG = 2.0 ** 127  # Exact in bfloat16; BIG + BIG overflows float32 to +Inf.
# case name -> {"input" | "residual": [(row, column, value)]}, rows of the flattened
# [rows, D]. What PyTorch makes of them (float32): a NaN makes its row all NaN, in
# both norms, and so does +-Inf in LayerNorm (mean and variance are NaN); in RMSNorm
# +-Inf makes mean(x^2) = +Inf and rsqrt(+Inf) = 0, so y = x * 0 * w is NaN at each
# Inf and a zero with the sign of x * w elsewhere. With a residual, s = x + residual
# is what counts: Inf in either, or finite halves that overflow (BIG + BIG).
NONFINITE = {
    "rms_norm_nonfinite_d7": {"input": [
        (0, 3, INF), (0, 0, 0.0), (0, 1, -0.0),  # +Inf, beside signed zeros
        (1, 0, -INF),                            # -Inf
        (2, 1, INF), (2, 5, -INF),               # both
        (3, 2, INF), (3, 4, NAN),                # Inf and NaN: all NaN
        (4, 6, NAN)]},                           # NaN; row 5 finite
    "rms_norm_nonfinite_d7_no_weight": {"input": [(0, 6, INF), (0, 2, -0.0), (1, 0, -INF)]},
    "rms_norm_nonfinite_d1": {"input": [(0, 0, INF), (1, 0, -INF)]},
    "rms_norm_nonfinite_2x3x33_gemma_residual": {
        "input": [(0, 32, INF), (2, 5, BIG), (3, 7, INF), (4, 0, NAN)],
        "residual": [(1, 16, -INF), (2, 5, BIG), (3, 7, -INF)]},  # row 3: Inf - Inf
    "layer_norm_nonfinite_d7": {"input": [(0, 2, INF), (1, 0, -INF), (2, 1, INF),
                                          (2, 3, NAN)]},
    "layer_norm_nonfinite_d33_residual": {"residual": [(0, 32, INF)]},
}


def rms_norm(x, eps, w, offset):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if w is not None:
        y = y * ((1.0 + w) if offset else w)
    return y


def make_case(gen, name, kind, shape, eps, weight_mode, has_bias, has_residual):
    dim = shape[-1]
    x = bf16_exact(torch.randn(shape, generator=gen) * 1.5 + 0.25)
    # Gemma stores small weights around 0 (scale 1 + w); others around 1.
    w = None
    if weight_mode == "offset":
        w = bf16_exact(torch.randn(dim, generator=gen) * 0.3)
    elif weight_mode == "plain":
        w = bf16_exact(1.0 + torch.randn(dim, generator=gen) * 0.3)
    b = bf16_exact(torch.randn(dim, generator=gen) * 0.5) if has_bias else None
    r = bf16_exact(torch.randn(shape, generator=gen)) if has_residual else None
    planted = NONFINITE.get(name, {})
    for tensor, where in ((x, "input"), (r, "residual")):
        for row, col, value in planted.get(where, []):
            tensor.view(-1, dim)[row, col] = value

    s = x + r if r is not None else x  # float32 add, as the kernels do it
    if kind == "layer_norm":
        y = F.layer_norm(s, [dim], w, b, eps)
    else:
        y = rms_norm(s, eps, w, weight_mode == "offset")
    assert y.dtype == torch.float32
    # Rows whose s is finite come out finite; the others hold a NaN.
    finite_rows = torch.isfinite(s.view(-1, dim)).all(-1)
    assert torch.isfinite(y.view(-1, dim)[finite_rows]).all()
    assert torch.isnan(y.view(-1, dim)[~finite_rows]).any(-1).all()
    assert (not planted) == bool(finite_rows.all()), name
    return {
        "name": name,
        "kind": kind,
        "shape": shape,
        "epsilon": short_float(eps),
        "weight_offset": weight_mode == "offset",
        "input": floats(x),
        "weight": floats(w),
        "bias": floats(b),
        "residual": floats(r),
        "expected": floats(y),
        "expected_residual_out": floats(s) if r is not None else None,
    }


def generate(out_dir):
    gen = seeded_generator(SEED)
    cases = [make_case(gen, *c) for c in CASES]
    write_golden(out_dir, OUT, golden_doc("make_norm_golden.py", SEED, {"cases": cases}))


if __name__ == "__main__":
    golden_common.main(generate, [OUT])
