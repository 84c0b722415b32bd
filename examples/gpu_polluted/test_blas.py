"""Plain passing tests (and the test that fills the shared kernel cache)."""

from __future__ import annotations

import numpy as np
import pytest
import shared_kernels

cp = pytest.importorskip("cupy", reason="CuPy is not installed")

pytestmark = pytest.mark.gpu


def test_matmul_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((32, 16)).astype(np.float32)
    np.testing.assert_allclose((cp.asarray(a) @ cp.asarray(b)).get(), a @ b, rtol=1e-4, atol=1e-4)


def test_scale_kernel() -> None:
    kernel = shared_kernels.compile_kernel("scale")
    x = cp.arange(1000, dtype=cp.float32)
    y = cp.empty_like(x)
    kernel((4,), (256,), (x, y, np.float32(2.0), np.int32(x.size)))
    np.testing.assert_array_equal(y.get(), np.arange(1000, dtype=np.float32) * 2)


def test_sum_of_ones() -> None:
    assert float(cp.ones(1 << 20, dtype=cp.float32).sum()) == float(1 << 20)
