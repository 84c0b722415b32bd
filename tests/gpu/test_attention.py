"""kernels.attention (fused flash-style forward) against a float64 NumPy reference."""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
import pytest
from gpu_reference import assert_close, attention_ref

import kernels

pytestmark = pytest.mark.gpu

DTYPES = ["float32", "float16"]

# (batch, heads, seq_q, seq_k, dim): odd and non-square sizes, partial tiles on both
# axes, head dims on both load paths (dim * itemsize % 16 == 0 or not).
SHAPES = [
    (1, 1, 1, 1, 64),
    (2, 3, 3, 5, 40),
    (1, 2, 127, 127, 80),
    (2, 2, 64, 200, 128),
    (1, 1, 200, 64, 64),
    (1, 2, 1, 300, 16),
    (1, 1, 17, 19, 33),
    (1, 3, 130, 70, 96),
    (1, 1, 65, 129, 2),
]


def make_inputs(
    shape: tuple[int, int, int, int, int], dtype: str, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    batch, heads, seq_q, seq_k, dim = shape
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, heads, seq_q, dim)).astype(dtype)
    k = rng.standard_normal((batch, heads, seq_k, dim)).astype(dtype)
    v = rng.standard_normal((batch, heads, seq_k, dim)).astype(dtype)
    return q, k, v


def run(cp: ModuleType, q: np.ndarray, k: np.ndarray, v: np.ndarray, **kw: object) -> np.ndarray:
    out = kernels.attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), **kw)  # type: ignore[arg-type]
    assert out.dtype == q.dtype
    assert out.shape == q.shape
    return out.get()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_reference(
    cp: ModuleType, shape: tuple[int, int, int, int, int], dtype: str, causal: bool
) -> None:
    q, k, v = make_inputs(shape, dtype)
    out = run(cp, q, k, v, causal=causal)
    expected = attention_ref(q, k, v, causal=causal, scale=1 / math.sqrt(shape[-1]))
    assert_close(out, expected, dtype)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_long_sequence(cp: ModuleType, dtype: str, causal: bool) -> None:
    q, k, v = make_inputs((1, 2, 4096, 4096, 64), dtype, seed=1)
    out = run(cp, q, k, v, causal=causal)
    assert_close(out, attention_ref(q, k, v, causal=causal, scale=0.125), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_explicit_scale(cp: ModuleType, dtype: str) -> None:
    q, k, v = make_inputs((1, 2, 33, 47, 64), dtype, seed=2)
    out = run(cp, q, k, v, scale=0.3)
    assert_close(out, attention_ref(q, k, v, causal=False, scale=0.3), dtype)


def test_causal_rows_that_see_no_key_are_zero(cp: ModuleType) -> None:
    # seq_q > seq_k, bottom-right aligned: query i sees keys j <= i - 3, so rows 0..2 see none.
    q, k, v = make_inputs((1, 1, 8, 5, 16), "float32", seed=3)
    out = run(cp, q, k, v, causal=True)
    np.testing.assert_array_equal(out[0, 0, :3], 0.0)
    assert np.abs(out[0, 0, 3:]).min() > 0
    assert_close(out, attention_ref(q, k, v, causal=True, scale=0.25), "float32")


def test_single_query_causal_sees_every_key(cp: ModuleType) -> None:
    # The decode step: one new query against a cache of 300 keys.
    q, k, v = make_inputs((1, 2, 1, 300, 64), "float16", seed=4)
    np.testing.assert_array_equal(run(cp, q, k, v, causal=True), run(cp, q, k, v, causal=False))


def test_unaligned_views_take_the_scalar_path(cp: ModuleType) -> None:
    # A contiguous slice starting one element in is C-contiguous but not 16-byte aligned,
    # so the 16-byte vector loads must not be used even though dim * 2 == 16.
    q, k, v = make_inputs((3, 1, 9, 11, 8), "float16", seed=5)
    flat = cp.asarray(np.concatenate([np.zeros(1, np.float16), q.reshape(-1)]))
    q_view = flat[1:].reshape(q.shape)
    assert q_view.flags.c_contiguous
    assert q_view.data.ptr % 16 != 0
    out = kernels.attention(q_view, cp.asarray(k), cp.asarray(v)).get()
    assert_close(out, attention_ref(q, k, v, causal=False, scale=1 / math.sqrt(8)), "float16")


@pytest.mark.parametrize("shape", [(0, 2, 5, 5, 64), (2, 0, 5, 5, 64), (1, 2, 0, 5, 64)], ids=str)
def test_empty_batch_gives_empty_output(cp: ModuleType, shape: tuple[int, ...]) -> None:
    batch, heads, seq_q, seq_k, dim = shape
    q = cp.empty((batch, heads, seq_q, dim), cp.float16)
    kv = cp.empty((batch, heads, seq_k, dim), cp.float16)
    assert kernels.attention(q, kv, kv).shape == q.shape


def test_no_keys_gives_zeros(cp: ModuleType) -> None:
    q = cp.ones((1, 1, 4, 16), cp.float32)
    kv = cp.empty((1, 1, 0, 16), cp.float32)
    np.testing.assert_array_equal(kernels.attention(q, kv, kv).get(), 0.0)


def test_rejects_head_dim_over_limit(cp: ModuleType) -> None:
    x = cp.zeros((1, 1, 4, 160), cp.float16)
    with pytest.raises(ValueError, match="head dim must be at most 128, got 160"):
        kernels.attention(x, x, x)


def test_rejects_three_dimensional_input(cp: ModuleType) -> None:
    x = cp.zeros((1, 4, 16), cp.float32)
    with pytest.raises(ValueError, match=r"q must have 4 dimensions, got shape \(1, 4, 16\)"):
        kernels.attention(x, x, x)


def test_rejects_mismatched_head_dim(cp: ModuleType) -> None:
    q = cp.zeros((1, 1, 4, 16), cp.float32)
    kv = cp.zeros((1, 1, 4, 32), cp.float32)
    with pytest.raises(ValueError, match="must share batch, heads and dim"):
        kernels.attention(q, kv, kv)


def test_rejects_mixed_dtypes(cp: ModuleType) -> None:
    q = cp.zeros((1, 1, 4, 16), cp.float32)
    kv = cp.zeros((1, 1, 4, 16), cp.float16)
    with pytest.raises(TypeError, match="q=float32, k=float16, v=float16"):
        kernels.attention(q, kv, kv)


def test_rejects_transposed_key(cp: ModuleType) -> None:
    q = cp.zeros((1, 1, 4, 16), cp.float32)
    k = cp.zeros((1, 1, 16, 4), cp.float32).swapaxes(-1, -2)
    with pytest.raises(ValueError, match="k must be C-contiguous"):
        kernels.attention(q, k, q)
