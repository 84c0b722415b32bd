"""kernels.layer_norm against a float64 NumPy reference."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
from gpu_reference import assert_close, layer_norm_ref

import kernels

pytestmark = pytest.mark.gpu

DTYPES = ["float32", "float16"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (3, 5), (2, 7, 127), (64, 1024), (3, 4096)], ids=str)
def test_matches_reference(cp: ModuleType, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    weight = rng.standard_normal(shape[-1]).astype(dtype)
    bias = rng.standard_normal(shape[-1]).astype(dtype)
    y = kernels.layer_norm(cp.asarray(x), cp.asarray(weight), cp.asarray(bias), eps=1e-5)
    assert y.dtype == x.dtype
    assert_close(y.get(), layer_norm_ref(x, weight, bias, 1e-5), dtype)


def test_large_mean_does_not_cancel_variance(cp: ModuleType) -> None:
    # A one-pass E[x^2] - E[x]^2 loses everything here in float32; two passes do not.
    x = (1.0e4 + np.random.default_rng(2).standard_normal((4, 512))).astype(np.float32)
    ones, zeros = np.ones(512, np.float32), np.zeros(512, np.float32)
    y = kernels.layer_norm(cp.asarray(x), cp.asarray(ones), cp.asarray(zeros)).get()
    np.testing.assert_allclose(y, layer_norm_ref(x, ones, zeros, 1e-5), rtol=1e-3, atol=1e-3)


def test_empty_batch(cp: ModuleType) -> None:
    x = cp.empty((0, 8), dtype=cp.float16)
    w = cp.ones(8, dtype=cp.float16)
    y = kernels.layer_norm(x, w, w)
    assert y.shape == (0, 8)


def test_rejects_weight_of_wrong_length(cp: ModuleType) -> None:
    x = cp.zeros((2, 8), dtype=cp.float32)
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\).*got \(7,\)"):
        kernels.layer_norm(x, cp.ones(7, dtype=cp.float32), cp.zeros(8, dtype=cp.float32))


def test_rejects_mixed_dtypes(cp: ModuleType) -> None:
    x = cp.zeros((2, 8), dtype=cp.float32)
    with pytest.raises(TypeError, match="bias=float16"):
        kernels.layer_norm(x, cp.ones(8, dtype=cp.float32), cp.zeros(8, dtype=cp.float16))
