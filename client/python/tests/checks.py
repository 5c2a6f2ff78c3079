"""Numeric comparisons shared by the tests."""
import numpy as np
import torch


def assert_close(got, want, tol, what=""):
    """|got - want| <= tol * max(1, |want|) everywhere (the bound the project's
    golden tests use), naming the worst element on failure. NaN must meet NaN."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{what}: NaNs differ"
    finite = ~np.isnan(want)
    excess = np.where(finite, np.abs(got - want) - tol * np.maximum(1.0, np.abs(want)), 0)
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    assert excess[worst] <= 0, (
        f"{what}: at {worst} got {got[worst]!r}, want {want[worst]!r} "
        f"(|diff| {abs(got[worst] - want[worst]):.3g} > {tol} * max(1, |want|))")


def bf16(a):
    """float32 values rounded to bfloat16 by torch: what the server sees when an
    array travels as BFLOAT16."""
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(
        torch.bfloat16).to(torch.float32).numpy()


def t(a):
    """A float32 torch tensor of an array."""
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
