"""kernels.softmax against a float64 NumPy reference."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
from gpu_reference import assert_close, softmax_ref

import kernels

pytestmark = pytest.mark.gpu

DTYPES = ["float32", "float16"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape", [(1,), (3, 7), (2, 3, 127), (4, 1000), (2, 2, 4096), (1, 33, 64)], ids=str
)
def test_matches_reference(cp: ModuleType, dtype: str, shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype) * 3
    y = kernels.softmax(cp.asarray(x))
    assert y.dtype == x.dtype
    assert y.shape == x.shape
    assert_close(y.get(), softmax_ref(x), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_large_logits_do_not_overflow(cp: ModuleType, dtype: str) -> None:
    # exp(x) alone overflows float32 at x > 88 and float16 at x > 11; the max is subtracted first.
    x = np.array([[1000.0, 999.0, 0.0], [-5.0e4, -5.0e4, -5.0e4]], dtype=dtype)
    y = kernels.softmax(cp.asarray(x)).get()
    assert np.isfinite(y).all()
    assert_close(y, softmax_ref(x), dtype)


def test_masked_entries_get_zero(cp: ModuleType) -> None:
    x = np.array([[0.0, -np.inf, 0.0, -np.inf]], dtype=np.float32)
    y = kernels.softmax(cp.asarray(x)).get()
    np.testing.assert_array_equal(y, [[0.5, 0.0, 0.5, 0.0]])


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (2, 0, 3)], ids=str)
def test_empty_input_gives_empty_output(cp: ModuleType, shape: tuple[int, ...]) -> None:
    y = kernels.softmax(cp.empty(shape, dtype=cp.float32))
    assert y.shape == shape
    assert y.dtype == cp.float32


def test_rejects_numpy_array() -> None:
    with pytest.raises(TypeError, match=r"x must be a cupy\.ndarray, got numpy\.ndarray"):
        kernels.softmax(np.zeros((2, 3), dtype=np.float32))


def test_rejects_integer_dtype(cp: ModuleType) -> None:
    with pytest.raises(TypeError, match="x must be float32 or float16, got int32"):
        kernels.softmax(cp.zeros((2, 3), dtype=cp.int32))


def test_rejects_non_contiguous(cp: ModuleType) -> None:
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        kernels.softmax(cp.zeros((4, 6), dtype=cp.float32).T)


def test_rejects_scalar(cp: ModuleType) -> None:
    with pytest.raises(ValueError, match="x must have at least 1 dimension"):
        kernels.softmax(cp.float32(1.0) * cp.ones((), dtype=cp.float32))
