"""numpy arrays <-> layerserve.v1.Tensor, and float32 <-> bfloat16 bits.

The wire is always little-endian and row-major (layerserve.proto). numpy has no
bfloat16, so BFLOAT16 travels as uint16 bit patterns made here: float32 rounded to
nearest even, NaN kept a (quiet) NaN, exactly as the server's common/dtype.cc and
torch.bfloat16 do. Every decoded tensor comes back as a float32 array.
Pure functions; safe from any thread.
"""
from typing import Optional, Union

import numpy as np
from numpy.typing import ArrayLike

from ._stubs import pb

# Accepted spellings of a wire dtype: the proto enum value, its name, or the numpy-ish
# name, in any case.
_DTYPES = {
    "float32": pb.FLOAT32, "f32": pb.FLOAT32, "fp32": pb.FLOAT32,
    "bfloat16": pb.BFLOAT16, "bf16": pb.BFLOAT16,
    "float16": pb.FLOAT16, "f16": pb.FLOAT16, "fp16": pb.FLOAT16, "half": pb.FLOAT16,
}
_ITEM_SIZE = {pb.FLOAT32: 4, pb.BFLOAT16: 2, pb.FLOAT16: 2}

# A wire dtype: a name ("float32", "bfloat16", "float16"...), a pb.DataType value,
# or None for the default.
DType = Union[str, int, None]


def wire_dtype(dtype: DType, array: Optional[np.ndarray] = None) -> int:
    """The pb.DataType for `dtype`; None picks FLOAT16 for a float16 array and
    FLOAT32 for anything else (numpy cannot hold bfloat16: ask for it by name)."""
    if dtype is None:
        if array is not None and array.dtype == np.float16:
            return pb.FLOAT16
        return pb.FLOAT32
    if isinstance(dtype, str):
        if dtype.lower() in _DTYPES:
            return _DTYPES[dtype.lower()]
        raise ValueError(f"unknown dtype {dtype!r}: use float32, bfloat16 or float16")
    if dtype in _ITEM_SIZE:
        return int(dtype)
    raise ValueError(f"unknown dtype {dtype!r}: use float32, bfloat16 or float16")


def float32_to_bfloat16_bits(values: ArrayLike) -> np.ndarray:
    """bfloat16 bit patterns (uint16, same shape) of float32 `values`: round to
    nearest even; overflow becomes +-Inf; NaN keeps its sign and top payload bits
    with the quiet bit forced, so it can never turn into Inf."""
    values = np.asarray(values, dtype=np.float32)
    # Flat: uint32 arithmetic on arrays wraps silently (only NaNs can wrap, and they
    # are replaced), where on 0-d scalars numpy would warn.
    bits = np.ascontiguousarray(values).reshape(-1).view(np.uint32)
    # Add just under half an ulp, plus one if the kept part is odd: ties go to even,
    # and a carry into the exponent is right (the largest floats round to Inf).
    rounded = ((bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> 16)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    quiet_nan = (bits >> 16) | np.uint32(0x0040)
    return np.where(nan, quiet_nan, rounded).astype(np.uint16).reshape(values.shape)


def bfloat16_bits_to_float32(bits: ArrayLike) -> np.ndarray:
    """float32 values (exact) of bfloat16 bit patterns given as uint16."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise ValueError(f"bfloat16 bits must be uint16, got {bits.dtype}")
    return (bits.astype(np.uint32) << 16).view(np.float32)


def round_to_bfloat16(values: ArrayLike) -> np.ndarray:
    """float32 `values` rounded to the nearest bfloat16 (what the server sees when
    they travel as BFLOAT16)."""
    return bfloat16_bits_to_float32(float32_to_bfloat16_bits(values))


def to_tensor(array: ArrayLike, dtype: DType = None, name: str = "tensor") -> "pb.Tensor":
    """A pb.Tensor of `array` (anything np.asarray takes: real numbers, rank >= 1,
    every dimension >= 1) in wire dtype `dtype` (see wire_dtype). Raises ValueError
    naming `name` when the array cannot be a tensor."""
    a = np.asarray(array)
    if a.dtype.kind not in "fiub":
        raise ValueError(f"{name}: needs real numbers, got dtype {a.dtype}")
    if a.ndim == 0:
        raise ValueError(f"{name}: needs rank >= 1, got a scalar")
    if any(d < 1 for d in a.shape):
        raise ValueError(f"{name}.shape: every dimension must be >= 1, got {list(a.shape)}")
    wire = wire_dtype(dtype, a)
    if wire == pb.FLOAT32:
        data = np.ascontiguousarray(a, dtype="<f4").tobytes()
    elif wire == pb.FLOAT16:
        data = np.ascontiguousarray(a, dtype="<f2").tobytes()
    else:
        data = float32_to_bfloat16_bits(a.astype(np.float32)).astype("<u2").tobytes()
    return pb.Tensor(shape=a.shape, dtype=wire, data=data)


def from_tensor(tensor: "pb.Tensor", name: str = "tensor") -> np.ndarray:
    """The values of a pb.Tensor as a new, writable float32 array of its shape.
    Raises ValueError when the byte count does not match shape and dtype."""
    if tensor.dtype not in _ITEM_SIZE:
        raise ValueError(f"{name}.dtype: {pb.DataType.Name(tensor.dtype)} is not a "
                         "tensor dtype")
    shape = tuple(int(d) for d in tensor.shape)
    count = int(np.prod(shape, dtype=np.int64))
    need = count * _ITEM_SIZE[tensor.dtype]
    if any(d < 0 for d in shape) or len(tensor.data) != need:
        raise ValueError(f"{name}.data: shape {list(shape)} "
                         f"{pb.DataType.Name(tensor.dtype)} needs {need} bytes, "
                         f"got {len(tensor.data)}")
    if tensor.dtype == pb.FLOAT32:
        values = np.frombuffer(tensor.data, dtype="<f4").astype(np.float32)  # copies
    elif tensor.dtype == pb.FLOAT16:
        values = np.frombuffer(tensor.data, dtype="<f2").astype(np.float32)
    else:
        values = bfloat16_bits_to_float32(np.frombuffer(tensor.data, dtype="<u2")
                                          .astype(np.uint16))
    return values.reshape(shape)
