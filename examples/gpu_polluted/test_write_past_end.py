"""failed, and order-dependent victims: a scatter with a wrong stride writes ~4 TiB
past its buffer. The illegal address is a sticky error: the CUDA context is dead
for the rest of the process, so every later test in the same interpreter fails
too, though each passes alone. Named to sort last, so in a one-interpreter run the
poison reaches only this file's own tests.
"""

from __future__ import annotations

import numpy as np
import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed")

pytestmark = pytest.mark.gpu

SCATTER = cp.RawKernel(
    r"""
extern "C" __global__ void scatter(const float* x, float* out, const long long* index, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[index[i]] = x[i];
}
""",
    "scatter",
)


def test_scatter_rows() -> None:
    x = cp.arange(256, dtype=cp.float32)
    out = cp.zeros(256 * 64, dtype=cp.float32)
    index = cp.arange(256, dtype=cp.int64) * (1 << 32)  # BUG: the row stride is 64, not 2**32
    SCATTER((1,), (256,), (x, out, index, np.int32(x.size)))
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(out.get()[::64], x.get())


def test_after_poison_sum() -> None:
    assert int(cp.arange(10).sum()) == 45


def test_after_poison_matmul() -> None:
    a = cp.eye(8, dtype=cp.float32)
    np.testing.assert_array_equal((a @ a).get(), np.eye(8, dtype=np.float32))
