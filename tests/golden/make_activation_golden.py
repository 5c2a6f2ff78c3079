"""Writes tests/golden/activation_golden.json: Activate cases computed by PyTorch.

Run from anywhere with Debian's interpreter (the one that has torch):

    /usr/bin/python3 tests/golden/make_activation_golden.py [--check]

The output is committed; rerun only when the cases change. Seeded, so a rerun with
the same torch gives the same file; --check regenerates it in a temporary
directory and fails unless it equals the committed one (golden_common.py; ctest
runs it as golden_check_activation).

What PyTorch computes (float32 throughout), by the proto's Activation name:
  RELU        F.relu(x)
  GELU        F.gelu(x)                      (exact erf; HF GELUActivation)
  GELU_TANH   F.gelu(x, approximate="tanh")  (HF GELUTanh / gelu_pytorch_tanh); one
              case instead follows HF NewGELUActivation (gelu_new) written in torch
              ops: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), which
              differs from the fused kernel by a few float32 ulps.
  SILU        F.silu(x)
  SIGMOID     torch.sigmoid(x)
  TANH        torch.tanh(x)
  QUICK_GELU  x * torch.sigmoid(1.702 * x)   (HF QuickGELUActivation)
  SWIGLU      F.silu(gate) * up              (HF LlamaMLP: act_fn(gate_proj(x)) *
                                              up_proj(x); vLLM SiluAndMul)
  GEGLU       F.gelu(gate) * up
  GEGLU_TANH  F.gelu(gate, approximate="tanh") * up   (Gemma's MLP)
  REGLU       F.relu(gate) * up
Gated cases come in two forms: "gated" (separate gate and up tensors, the up tensor
is "input") and "packed" (one input [..., 2F]; gate, up = input.chunk(2, dim=-1), as
vLLM's SiluAndMul; the output is [..., F]).

Cases: random tensors (several shapes, odd last dims), a dense grid over [-12, 12]
(each activation's whole transition), and the extremes: +-inf, NaN, +-1e4, +-1e20,
the largest bfloat16, values where float32 exp overflows (-88 ... -105), a bfloat16
subnormal and signed zeros; for the gated forms every pairing of such gate and up
values (e.g. act(gate) = 0 times up = inf is NaN).

Every input value is exactly representable in bfloat16 (rounded through
torch.bfloat16 here), so the same expected output serves a test that sends the
inputs as BFLOAT16. Tolerances for consumers of this file:
  FLOAT32 wire:   |got - expected| <= 1e-5 * max(1, |expected|)
  BFLOAT16 wire:  |got - expected| <= 2e-2 * max(1, |expected|)
  NaN expected:   got is NaN; +-inf expected: got is the same infinity.
(The bfloat16 bound covers rounding the output to 8 significant bits, 2^-9
relative, with margin. A gated output rounds act(gate) * up once, so the same
bounds hold.)

Numbers: each is written as the shortest decimal that, read as a double and then
rounded to float32, gives back the exact float32 value; the script checks this for
every number before writing. Non-finite values are the strings "nan", "inf" and
"-inf" (JSON has no numbers for them). Schema:
  {"generator", "torch_version", "seed", "cases": [{"name", "activation", "form",
   "shape", "input", "gate"|null, "expected_shape", "expected"}]}
"activation" is the proto enum name; "form" is "elementwise", "gated" or "packed";
"shape" is the shape of input (and of gate); arrays are flat, row-major.
"""

import math

import torch
import torch.nn.functional as F

import golden_common
from golden_common import bf16_exact, floats, golden_doc, seeded_generator, write_golden

SEED = 20240612
OUT = "activation_golden.json"

ELEMENTWISE = {
    "RELU": F.relu,
    "GELU": F.gelu,
    "GELU_TANH": lambda x: F.gelu(x, approximate="tanh"),
    "SILU": F.silu,
    "SIGMOID": torch.sigmoid,
    "TANH": torch.tanh,
    "QUICK_GELU": lambda x: x * torch.sigmoid(1.702 * x),
}

# The activation each gated kind applies to its gate.
GATED = {
    "SWIGLU": ELEMENTWISE["SILU"],
    "GEGLU": ELEMENTWISE["GELU"],
    "GEGLU_TANH": ELEMENTWISE["GELU_TANH"],
    "REGLU": ELEMENTWISE["RELU"],
}


def hf_gelu_new(x):
    """HF NewGELUActivation.forward, in torch ops."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                       (x + 0.044715 * torch.pow(x, 3.0))))


# Extreme element-wise inputs (all exact in bfloat16 after rounding).
EXTREMES = [float("-inf"), float("inf"), float("nan"), -1e4, 1e4, -1e20, 1e20,
            -3.3895313892515355e38, 3.3895313892515355e38,  # largest bfloat16
            -88.0, -89.0, -90.0, -100.0, -104.0, -105.0, -200.0, 88.0, 100.0,
            2.0 ** -130, -(2.0 ** -130), 0.0, -0.0, 1.0, -1.0]

# Gate and up values paired with each other in the gated extremes cases.
GATED_EXTREMES = [float("nan"), float("inf"), float("-inf"), 0.0, -30.0, 30.0, -1e20,
                  1e20, 1.5]


def case(name, activation, form, x, gate, expected):
    assert expected.dtype == torch.float32
    return {
        "name": name,
        "activation": activation,
        "form": form,
        "shape": list(x.shape),
        "input": floats(x),
        "gate": floats(gate),
        "expected_shape": list(expected.shape),
        "expected": floats(expected),
    }


def elementwise_cases(gen):
    cases = []
    shapes = {"RELU": [2, 3, 67], "GELU": [3, 67], "GELU_TANH": [2, 3, 67],
              "SILU": [1, 1025], "SIGMOID": [4, 67], "TANH": [3, 67],
              "QUICK_GELU": [2, 3, 67]}
    grid = bf16_exact(torch.linspace(-12.0, 12.0, 481))
    extremes = bf16_exact(torch.tensor(EXTREMES, dtype=torch.float32))
    for name, fn in ELEMENTWISE.items():
        x = bf16_exact(torch.randn(shapes[name], generator=gen) * 4.0)
        cases.append(case(f"{name.lower()}_random_{'x'.join(map(str, x.shape))}", name,
                          "elementwise", x, None, fn(x)))
        cases.append(case(f"{name.lower()}_grid", name, "elementwise", grid, None,
                          fn(grid)))
        cases.append(case(f"{name.lower()}_extremes", name, "elementwise", extremes,
                          None, fn(extremes)))
    x = bf16_exact(torch.randn([3, 257], generator=gen) * 3.0)
    cases.append(case("gelu_tanh_hf_gelu_new_3x257", "GELU_TANH", "elementwise", x, None,
                      hf_gelu_new(x)))
    return cases


def gated_cases(gen):
    cases = []
    values = torch.tensor(GATED_EXTREMES, dtype=torch.float32)
    n = len(GATED_EXTREMES)
    gate_extremes = bf16_exact(values.repeat_interleave(n))  # every pairing
    up_extremes = bf16_exact(values.repeat(n))
    for name, act in GATED.items():
        gate = bf16_exact(torch.randn([2, 3, 64], generator=gen) * 3.0)
        up = bf16_exact(torch.randn([2, 3, 64], generator=gen))
        cases.append(case(f"{name.lower()}_gated_2x3x64", name, "gated", up, gate,
                          act(gate) * up))
        packed = bf16_exact(torch.randn([3, 2 * 48], generator=gen) * 3.0)
        g, u = packed.chunk(2, dim=-1)
        cases.append(case(f"{name.lower()}_packed_3x96", name, "packed", packed, None,
                          act(g) * u))
        cases.append(case(f"{name.lower()}_gated_extremes", name, "gated", up_extremes,
                          gate_extremes, act(gate_extremes) * up_extremes))
    # A packed case with an odd F and rank 3.
    packed = bf16_exact(torch.randn([2, 2, 2 * 33], generator=gen) * 3.0)
    g, u = packed.chunk(2, dim=-1)
    cases.append(case("swiglu_packed_2x2x66", "SWIGLU", "packed", packed, None,
                      F.silu(g) * u))
    return cases


def generate(out_dir):
    gen = seeded_generator(SEED)
    cases = elementwise_cases(gen) + gated_cases(gen)
    write_golden(out_dir, OUT,
                 golden_doc("make_activation_golden.py", SEED, {"cases": cases}))


if __name__ == "__main__":
    golden_common.main(generate, [OUT])
