#!/usr/bin/python3
"""The rational tanh of kernels/activation/activation_fast.cc (struct Tanh), fitted and checked.

tanh(x) = x P(x^2) / Q(x^2) on |x| <= 9, P and Q of degree 4 with Q(0) = 1, fitted
by iteratively reweighted linear least squares on the relative error (Loeb's
linearization f Q - P = 0, weights raised where the error peaks), then checked in
float32 the way the kernel evaluates it: coefficients rounded to float32, Horner
in float32, the quotient clamped to [-1, 1]. Run with Debian's numpy:

    /usr/bin/python3 tests/kernels/activation/tanh_rational_fit.py

It prints the coefficients (as the kernel holds them) and the worst float32
errors in units of 2^-23; activation_test.cc holds the kernel to 8 of them.
"""
import numpy as np

LIMIT = 9.0  # Beyond, tanh rounds to +-1 in float32: 1 - tanh(9) = 3e-8 < 2^-25.
DEGREE = 4


def fit():
    x = np.linspace(0, LIMIT, 200001)[1:]
    s = x * x
    f = np.tanh(x) / x
    weights = np.ones_like(x)
    q_values = np.ones_like(x)
    best = None
    for _ in range(60):
        a = np.hstack([np.vander(s, DEGREE + 1, increasing=True),
                       -(f[:, None] * np.vander(s, DEGREE + 1, increasing=True)[:, 1:])])
        w = weights / (np.abs(q_values) * f)
        coef, *_ = np.linalg.lstsq(a * w[:, None], f * w, rcond=None)
        p = coef[:DEGREE + 1]
        q = np.concatenate([[1.0], coef[DEGREE + 1:]])
        q_values = np.polyval(q[::-1], s)
        err = (np.polyval(p[::-1], s) / q_values - f) / f
        worst = np.max(np.abs(err))
        if best is None or worst < best[0]:
            best = (worst, p, q)
        weights = weights * (1 + 10 * (np.abs(err) / worst) ** 2)
        weights /= weights.mean()
    return best


def horner32(coefficients, s):
    r = np.full_like(s, coefficients[-1])
    for c in coefficients[-2::-1]:
        r = (r * s + c).astype(np.float32)
    return r


def main():
    worst, p, q = fit()
    p32, q32 = p.astype(np.float32), q.astype(np.float32)
    print(f"relative error of the fit in double: {worst:.3g}")
    print("P:", [float(c) for c in p32])
    print("Q:", [float(c) for c in q32])
    x = np.linspace(-12, 12, 4000001).astype(np.float32)
    xc = np.clip(x, np.float32(-LIMIT), np.float32(LIMIT))
    s = (xc * xc).astype(np.float32)
    y = np.clip((xc * horner32(p32, s) / horner32(q32, s)).astype(np.float32), -1, 1)
    ref = np.tanh(x.astype(np.float64))
    eps32 = 2.0 ** -23
    print(f"float32, worst absolute error: {np.max(np.abs(y - ref)) / eps32:.2f} eps32")
    nonzero = ref != 0
    rel = np.abs(y - ref)[nonzero] / np.abs(ref[nonzero])
    print(f"float32, worst relative error: {np.max(rel) / eps32:.2f} eps32")


if __name__ == "__main__":
    main()
