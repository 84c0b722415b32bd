"""Attention building blocks as CuPy kernels (CUDA C++ in ``kernels/*.cu``).

Importing this package needs no GPU and no CuPy; the first call of a kernel imports
CuPy and compiles that kernel's source (once per process).

All functions take C-contiguous ``cupy.ndarray`` inputs of one dtype, float32 or
float16, compute in float32 and return a new array of the input dtype.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from kernels._loader import KernelUnavailableError, get_kernel, import_cupy

if TYPE_CHECKING:
    import cupy

__all__ = [
    "MAX_HEAD_DIM",
    "KernelUnavailableError",
    "attention",
    "layer_norm",
    "softmax",
    "weighted_sum",
]

MAX_HEAD_DIM = 128
WARPS_PER_BLOCK = 8  # row kernels: one warp per row
ATTENTION_BLOCK_M = 64  # query rows per block, as ATT_BM in attention.cu
ATTENTION_BLOCK_N = 64
WEIGHTED_SUM_TILE = 64
_DTYPE_NAMES = {"float32": "float", "float16": "unsigned short"}


def _check_array(name: str, a: Any, ndim: int | None = None, min_ndim: int = 1) -> str:
    """Validate one input; return its dtype name. Raise TypeError/ValueError naming it."""
    cupy = import_cupy()
    if not isinstance(a, cupy.ndarray):
        kind = f"{type(a).__module__}.{type(a).__name__}"
        raise TypeError(f"{name} must be a cupy.ndarray, got {kind}")
    dtype = a.dtype.name
    if dtype not in _DTYPE_NAMES:
        raise TypeError(f"{name} must be float32 or float16, got {dtype}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(a.shape)}")
    if a.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimension(s), got shape {tuple(a.shape)}"
        )
    if not a.flags.c_contiguous:
        raise ValueError(
            f"{name} must be C-contiguous (shape {tuple(a.shape)}, strides {a.strides}); "
            "pass cupy.ascontiguousarray(...)"
        )
    return dtype


def _check_same_dtype(names: tuple[str, ...], dtypes: tuple[str, ...]) -> str:
    if len(set(dtypes)) != 1:
        listed = ", ".join(f"{n}={d}" for n, d in zip(names, dtypes, strict=True))
        raise TypeError(f"inputs must share one dtype, got {listed}")
    return dtypes[0]


def _row_grid(rows: int) -> tuple[int]:
    return (-(-rows // WARPS_PER_BLOCK),)


def softmax(x: cupy.ndarray) -> cupy.ndarray:
    """Softmax of each row of the last axis of ``x``."""
    dtype = _check_array("x", x)
    cupy = import_cupy()
    y = cupy.empty_like(x)
    n = x.shape[-1]
    if x.size == 0:
        return y
    rows = x.size // n
    kernel = get_kernel("softmax", f"softmax_rows<{_DTYPE_NAMES[dtype]}>")
    kernel(_row_grid(rows), (32 * WARPS_PER_BLOCK,), (x, y, np.int64(rows), np.int32(n)))
    return y


def layer_norm(
    x: cupy.ndarray, weight: cupy.ndarray, bias: cupy.ndarray, eps: float = 1e-5
) -> cupy.ndarray:
    """Normalise each row of the last axis of ``x`` to mean 0, variance 1, then scale and shift."""
    dtype = _check_same_dtype(
        ("x", "weight", "bias"),
        (
            _check_array("x", x),
            _check_array("weight", weight, ndim=1),
            _check_array("bias", bias, ndim=1),
        ),
    )
    n = x.shape[-1]
    for name, param in (("weight", weight), ("bias", bias)):
        if param.shape != (n,):
            raise ValueError(
                f"{name} must have shape ({n},) to match x's last axis, got {tuple(param.shape)}"
            )
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps!r}")
    cupy = import_cupy()
    y = cupy.empty_like(x)
    if x.size == 0:
        return y
    rows = x.size // n
    kernel = get_kernel("layer_norm", f"layer_norm_rows<{_DTYPE_NAMES[dtype]}>")
    kernel(
        _row_grid(rows),
        (32 * WARPS_PER_BLOCK,),
        (x, weight, bias, y, np.int64(rows), np.int32(n), np.float32(eps)),
    )
    return y


def weighted_sum(weights: cupy.ndarray, v: cupy.ndarray) -> cupy.ndarray:
    """``weights @ v`` over the last two axes: [..., M, K] @ [..., K, N] -> [..., M, N]."""
    dtype = _check_same_dtype(
        ("weights", "v"),
        (_check_array("weights", weights, min_ndim=2), _check_array("v", v, min_ndim=2)),
    )
    if weights.shape[:-2] != v.shape[:-2] or weights.shape[-1] != v.shape[-2]:
        raise ValueError(
            f"weights [..., M, K] and v [..., K, N] must share leading axes and K, got "
            f"weights {tuple(weights.shape)} and v {tuple(v.shape)}"
        )
    cupy = import_cupy()
    m, k = weights.shape[-2:]
    n = v.shape[-1]
    out_shape = (*weights.shape[:-2], m, n)
    if k == 0:
        return cupy.zeros(out_shape, dtype=weights.dtype)
    out = cupy.empty(out_shape, dtype=weights.dtype)
    if out.size == 0:
        return out
    batch = out.size // (m * n)
    kernel = get_kernel("weighted_sum", f"weighted_sum_tiled<{_DTYPE_NAMES[dtype]}>")
    tile = WEIGHTED_SUM_TILE
    grid = (-(-n // tile), -(-m // tile), batch)
    kernel(grid, (256,), (weights, v, out, np.int32(m), np.int32(k), np.int32(n)))
    return out


def attention(
    q: cupy.ndarray,
    k: cupy.ndarray,
    v: cupy.ndarray,
    *,
    causal: bool = False,
    scale: float | None = None,
) -> cupy.ndarray:
    """Fused ``softmax(q @ k^T * scale) @ v`` for [batch, heads, seq, dim] inputs.

    ``k`` and ``v`` share one shape ``[batch, heads, seq_k, dim]``; ``q`` is
    ``[batch, heads, seq_q, dim]``. ``scale`` defaults to ``1 / sqrt(dim)``. With
    ``causal``, query ``i`` sees key ``j`` only when ``j <= i + seq_k - seq_q``
    (bottom-right alignment, as FlashAttention); a query that sees no key gets zeros.
    """
    dtype = _check_same_dtype(
        ("q", "k", "v"),
        (_check_array("q", q, ndim=4), _check_array("k", k, ndim=4), _check_array("v", v, ndim=4)),
    )
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got k {k.shape} and v {v.shape}")
    if q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(
            f"q [batch, heads, seq_q, dim] and k [batch, heads, seq_k, dim] must share batch, "
            f"heads and dim, got q {q.shape} and k {k.shape}"
        )
    batch, heads, seq_q, dim = q.shape
    seq_k = k.shape[2]
    if dim > MAX_HEAD_DIM:
        raise ValueError(f"head dim must be at most {MAX_HEAD_DIM}, got {dim}")
    if scale is None:
        scale = 1.0 / math.sqrt(dim) if dim else 1.0
    cupy = import_cupy()
    if seq_k == 0:
        return cupy.zeros(q.shape, dtype=q.dtype)  # nothing to attend to
    out = cupy.empty(q.shape, dtype=q.dtype)
    if out.size == 0:
        return out
    padded = -(-dim // 16) * 16
    itemsize = q.dtype.itemsize
    # 16-byte vector loads need dim * itemsize % 16 == 0 and aligned base pointers
    # (a contiguous slice can start anywhere).
    vec = (dim * itemsize) % 16 == 0 and all(a.data.ptr % 16 == 0 for a in (q, k, v))
    args = (
        q,
        k,
        v,
        out,
        np.int32(seq_q),
        np.int32(seq_k),
        np.int32(dim),
        np.float32(scale * math.log2(math.e)),
        np.int32(bool(causal)),
        np.int32(vec),
    )
    grid = (-(-seq_q // ATTENTION_BLOCK_M), batch * heads)
    if dtype == "float16":
        kernel = get_kernel("attention", f"attention_fwd_f16<{padded}>")
        kernel(grid, (128,), args)
    else:
        # Q and K/V tiles [64][padded + 4] and the P tile [64][68], float32.
        rows = ATTENTION_BLOCK_M
        shared = 4 * (2 * rows * (padded + 4) + rows * (ATTENTION_BLOCK_N + 4))
        kernel = get_kernel("attention", f"attention_fwd_f32<{padded}>", shared_bytes=shared)
        kernel(grid, (256,), args, shared_mem=shared)
    return out
