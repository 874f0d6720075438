"""Host (numpy) helpers for kernels of the py backend: the case's 16-bit arrays to float32 and
back, whatever format the bridge used for bfloat16 (ml_dtypes.bfloat16 when importable, else
uint16 bit patterns; the dtype keyword the bridge passes says which format the data is in).

to_float(x, dtype)        float16 / bfloat16 (either form) -> float32 (exact)
from_float(x, dtype, like) float32/float64 -> the 16-bit format of `like`, round to nearest even
                           (float64 to bfloat16 goes through float32 rounded to odd, so it is
                           rounded once, correctly)
"""
import numpy as np


def to_float(x, dtype):
    x = np.asarray(x)
    if dtype == "float16" or x.dtype == np.float32 or x.dtype == np.float64:
        return x.astype(np.float32)
    if x.dtype == np.uint16:
        return (x.astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float32)  # ml_dtypes.bfloat16


def _bf16_bits(f32):
    """float32 -> bfloat16 bit patterns, round to nearest even; NaN stays NaN (quiet)."""
    u = np.ascontiguousarray(f32, dtype=np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(f32)
    return np.where(nan, ((u >> 16) | np.uint32(0x40)).astype(np.uint16), rounded)


def _f32_round_to_odd(x):
    """float64 -> float32 rounding to odd (truncate, then set the last bit when inexact): the
    following rounding to bfloat16 is then the correct rounding of x (24 >= 8 + 2 bits)."""
    y = x.astype(np.float32)
    yd = y.astype(np.float64)
    inexact = (yd != x) & np.isfinite(x) & np.isfinite(y)
    y = np.where(inexact & (np.abs(yd) > np.abs(x)), np.nextafter(y, np.float32(0)), y)
    u = np.ascontiguousarray(y, dtype=np.float32).view(np.uint32)
    return np.where(inexact, u | np.uint32(1), u).view(np.float32)


def from_float(x, dtype, like):
    x = np.asarray(x)
    if dtype == "float16":
        return x.astype(np.float16)
    x32 = _f32_round_to_odd(x) if x.dtype == np.float64 else x.astype(np.float32)
    bits = _bf16_bits(x32)
    return bits if like.dtype == np.uint16 else bits.view(like.dtype)
