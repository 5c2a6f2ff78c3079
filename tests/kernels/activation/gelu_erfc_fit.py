#!/usr/bin/python3
"""The GELU of kernels/activation/activation_fast.cc (struct Gelu), fitted and checked.

GELU(x) = x Phi(x). With t = |x| and q(t) = Phi(-t) = erfc(t / sqrt2) / 2:

    GELU(x) = (x + t) / 2 - t q(t)       (x q for x < 0, x - x q for x >= 0)
    q(t)    = exp(-t^2 / 2) M(t)

M(t) = q(t) exp(t^2 / 2) is smooth on [0, inf): 1/2 at 0, ~1 / (t sqrt(2 pi)) far
out (Mills' ratio over sqrt(2 pi)). It is fitted as P(t) / Q(t), P of degree 3 and
Q of degree 4 with Q(0) = 1, by iteratively reweighted linear least squares
(Loeb's linearization M Q - P = 0) on [0, 14.5], on the relative error divided by
1 + t^2 / 2: the kernel's error budget, (10 + x^2) 2^-24 relative
(activation_test.cc), grows with x^2 too, and the fit's error is best spent where
the budget is loose (about 1.7 2^-24 below t = 1, 4.3 below 3, 143 at 14.5).

exp(y) for y = -t^2 / 2 in [-105.2, 0] is reduced as Cephes' expf is (y = n ln2 +
r, ln2 in two parts, |r| <= ln2 / 2) with a polynomial of degree 5 for exp(r),
fitted here with exp(0) = 1 kept exact.

The script rounds every coefficient to float32 and evaluates the kernel's formula
the kernel's way (float32 operations, fused multiply-adds rounded once), against
GELU in double over a dense sweep, and prints the worst error in units of the
kernel's budget. Run with Debian's numpy:

    /usr/bin/python3 tests/kernels/activation/gelu_erfc_fit.py
"""
import math

import numpy as np

LIMIT = 14.5  # q(14.5) < 2^-150: beyond, t q(t) rounds to 0 in float32.
P_DEGREE = 3
EXP_DEGREE = 5
LN2_HI = 0.693359375  # 9 bits: n * LN2_HI is exact for |n| < 2^15.
LN2_LO = -2.12194440e-4


def mills(t):
    return np.array([0.5 * math.erfc(v / math.sqrt(2)) * math.exp(v * v / 2) for v in t])


def budget(t):
    """The kernel's relative error bound in units of 2^-24 (activation_test.cc)."""
    return 10 + t * t


def loeb_fit(x, f, basis_p, basis_q, tolerance, iterations=80):
    """P / Q ~ f, Q's constant term 1, minimizing max |P/Q - f| / (f tolerance)."""
    weights = np.ones_like(x)
    q_values = np.ones_like(x)
    best = None
    for _ in range(iterations):
        a = np.hstack([basis_p, -(f[:, None] * basis_q[:, 1:])])
        w = weights / (np.abs(q_values) * np.abs(f) * tolerance)
        coef, *_ = np.linalg.lstsq(a * w[:, None], f * w, rcond=None)
        p = coef[:basis_p.shape[1]]
        q = np.concatenate([[1.0], coef[basis_p.shape[1]:]])
        q_values = basis_q @ q
        err = (basis_p @ p / q_values - f) / (f * tolerance)
        worst = np.max(np.abs(err))
        if best is None or worst < best[0]:
            best = (worst, p, q)
        weights = weights * (1 + 10 * (np.abs(err) / worst) ** 2)
        weights /= weights.mean()
    return best


def fit_mills():
    t = np.linspace(0, LIMIT, 100001)
    vander = lambda degree: np.vander(t, degree + 1, increasing=True)
    _, p, q = loeb_fit(t, mills(t), vander(P_DEGREE), vander(P_DEGREE + 1), 1 + t * t / 2)
    return p, q


def fit_exp():
    """exp(r) ~ 1 + r c1 + ... + r^5 c5 on |r| <= ln2 / 2: (exp(r) - 1) / r fitted
    as a polynomial of degree 4 by reweighted least squares on the relative error."""
    r = np.linspace(-math.log(2) / 2 - 1e-3, math.log(2) / 2 + 1e-3, 20001)
    r = r[r != 0]
    f = np.expm1(r) / r
    basis = np.vander(r, EXP_DEGREE, increasing=True)
    # The same fit with Q = 1. An error d in f is r d in exp(r): weighted to match.
    _, p, _ = loeb_fit(r, f, basis, np.ones((r.size, 1)), np.abs(np.exp(r) / np.expm1(r)))
    return np.concatenate([[1.0], p])


def f32(v):
    return np.asarray(v, dtype=np.float32)


def fma32(a, b, c):
    """a * b + c rounded once to float32 (the product of two floats is exact in
    double; the sum's double rounding is far below a float32 ulp here)."""
    return f32(a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64))


def horner32(coefficients, x):
    r = np.full_like(x, coefficients[-1])
    for c in coefficients[-2::-1]:
        r = fma32(r, x, np.full_like(x, c))
    return r


def gelu32(x, p, q, e):
    """The kernel's float32 evaluation (struct Gelu, with FMA)."""
    t = np.abs(x)
    tc = np.minimum(t, f32(LIMIT))
    y = f32(f32(tc * tc) * f32(-0.5))
    magic = f32(12583065.0)  # 1.5 * 2^23 + 127 + 26: 2^(n + 26), n >= -152.
    shifted = fma32(y, np.full_like(y, f32(1.44269504088896341)), np.full_like(y, magic))
    n = f32(shifted - magic)
    r = fma32(-n, np.full_like(n, f32(LN2_HI)), y)
    r = fma32(-n, np.full_like(n, f32(LN2_LO)), r)
    exp_r = horner32(e, r)
    scale = f32(np.ldexp(1.0, n.astype(np.int64) + 26))
    m = f32(horner32(p * f32(2.0 ** -26), tc) / horner32(q, tc))
    tail = f32(f32(exp_r * scale) * m)
    half = np.full_like(x, f32(0.5))
    return fma32(-tc, tail, fma32(x, half, f32(t * half)))


def gelu64(x):
    x = x.astype(np.float64)
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x])


def main():
    p, q = fit_mills()
    e = fit_exp()
    p32, q32, e32 = f32(p), f32(q), f32(e)
    print("P:", [float(c) for c in p32])
    print("Q:", [float(c) for c in q32])
    print("exp:", [float(c) for c in e32])
    x = f32(np.concatenate([np.linspace(-14.5, 6, 1000001),
                            -np.geomspace(1e-30, 14.5, 200001),
                            np.geomspace(1e-30, 6, 200001)]))
    got = gelu32(x, p32, q32, e32).astype(np.float64)
    ref = gelu64(x)
    normal = np.abs(ref) >= np.finfo(np.float32).tiny
    ulps = np.abs(got - ref)[normal] / np.abs(ref[normal]) * 2.0 ** 24
    share = ulps / budget(x[normal].astype(np.float64))
    i = np.argmax(share)
    print(f"float32: worst {share[i]:.2f} of the budget (10 + x^2) 2^-24, "
          f"at x = {x[normal][i]:.4g} ({ulps[i]:.2f} x 2^-24)")
    for lo, hi in ((0, 1), (1, 3), (3, 6), (6, 15)):
        band = (np.abs(x[normal]) >= lo) & (np.abs(x[normal]) < hi)
        print(f"  |x| in [{lo}, {hi}): worst {np.max(ulps[band]):.2f} x 2^-24")


if __name__ == "__main__":
    main()
