"""order-dependent: a kernel writes only the first len(x) elements of a cupy.empty
output, and the test expects the padding to be zero. A fresh process's first
allocations are zero-filled by the driver, so alone it passes; after
test_reference_fill returned blocks full of 7.0 (of exactly the output's size) to
CuPy's pool, cupy.empty hands one out again and the padding reads 7.0.
"""

from __future__ import annotations

import numpy as np
import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed")

pytestmark = pytest.mark.gpu

PAD_COPY = cp.RawKernel(
    r"""
extern "C" __global__ void pad_copy(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i];  // the tail [n, len(out)) is left as it was
}
""",
    "pad_copy",
)


def test_reference_fill() -> None:
    # Four 4 KiB blocks, back to the pool on return: the best fit for the next 4 KiB requests.
    blocks = [cp.full(1024, 7.0, dtype=cp.float32) for _ in range(4)]
    assert all(float(b.sum()) == 7.0 * 1024 for b in blocks)


def test_pad_tail_is_zero() -> None:
    x = cp.arange(1000, dtype=cp.float32)
    out = cp.empty(1024, dtype=cp.float32)  # BUG: should be cp.zeros
    PAD_COPY((4,), (256,), (x, out, np.int32(x.size)))
    host = out.get()
    np.testing.assert_array_equal(host[:1000], np.arange(1000, dtype=np.float32))
    np.testing.assert_array_equal(host[1000:], 0.0)
