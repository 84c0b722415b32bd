"""failed: a real off-by-one in a kernel's bound (the last element is never written).
The copy test beside it uses the correct bound and passes.
"""

from __future__ import annotations

import numpy as np
import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed")

pytestmark = pytest.mark.gpu

DOUBLE_IN_PLACE = cp.RawKernel(
    r"""
extern "C" __global__ void double_in_place(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n - 1) x[i] *= 2.0f;  // BUG: should be i < n
}
""",
    "double_in_place",
)

COPY = cp.RawKernel(
    r"""
extern "C" __global__ void copy(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
""",
    "copy",
)


def test_double_in_place() -> None:
    x = cp.arange(1, 1001, dtype=cp.float32)
    DOUBLE_IN_PLACE((4,), (256,), (x, np.int32(x.size)))
    np.testing.assert_array_equal(x.get(), np.arange(1, 1001, dtype=np.float32) * 2)


def test_copy() -> None:
    x = cp.arange(1000, dtype=cp.float32)
    y = cp.zeros_like(x)
    COPY((4,), (256,), (x, y, np.int32(x.size)))
    np.testing.assert_array_equal(y.get(), x.get())
