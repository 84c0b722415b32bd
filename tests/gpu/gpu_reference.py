"""Float64 NumPy references and the tolerances the GPU tests hold the kernels to.

Tolerances (``|actual - expected| <= atol + rtol * |expected|``, elementwise):

- float32: the kernels compute in float32, so a few float32 ulps (2**-23 ~ 1.2e-7)
  per operation, grown by sums over up to a few thousand terms: rtol = atol = 2e-5.
- float16: the reference is computed from the *same* fp16 input values (cast to
  float64), so input rounding is not counted. What is left is the fp16 rounding of
  the output, 2**-11 ~ 4.9e-4 relative, plus, in attention, the fp16 rounding of the
  probabilities P before P @ V (again 2**-11 relative per term, at most
  2**-11 * max|v| ~ 2.4e-3 absolute for v ~ N(0, 1)). rtol = 2e-3 covers the output
  rounding four times over; atol = 4e-3 covers the attention P rounding for |v| <= 4.
  A wrong mask, scale or missed tile is off by 1e-2 to 1e0 and fails these.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

TOLERANCES: dict[str, dict[str, float]] = {
    "float32": {"rtol": 2e-5, "atol": 2e-5},
    "float16": {"rtol": 2e-3, "atol": 4e-3},
}

Array = npt.NDArray[Any]


def softmax_ref(x: Array) -> Array:
    """Row softmax of the last axis in float64."""
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layer_norm_ref(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    """Layer norm over the last axis in float64 (biased variance, as torch)."""
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x64 - mean) / np.sqrt(var + eps) * weight.astype(np.float64) + bias.astype(np.float64)


def causal_mask(seq_q: int, seq_k: int) -> Array:
    """True where query i may see key j: j <= i + seq_k - seq_q (bottom-right aligned)."""
    i = np.arange(seq_q)[:, None]
    j = np.arange(seq_k)[None, :]
    return j <= i + (seq_k - seq_q)


def attention_ref(q: Array, k: Array, v: Array, *, causal: bool, scale: float) -> Array:
    """softmax(q k^T * scale) v in float64; rows that see no key are zeros."""
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    s = q64 @ np.swapaxes(k64, -1, -2) * scale
    if causal:
        s = np.where(causal_mask(q.shape[-2], k.shape[-2]), s, -np.inf)
    row_max = s.max(axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    e = np.exp(s - row_max)
    denom = e.sum(axis=-1, keepdims=True)
    p = np.divide(e, denom, out=np.zeros_like(e), where=denom > 0)
    return p @ v64


def assert_close(actual: Array, expected: Array, dtype: str) -> None:
    """Compare with this module's tolerance for ``dtype``; report the worst element."""
    tol = TOLERANCES[dtype]
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual.astype(np.float64), expected, **tol)
