"""depends-on-others: reads a compiled kernel from a module-level cache that only
test_blas.py::test_scale_kernel fills. Passes in one interpreter after it; fails
(KeyError) alone, in its own file, and in parallel.
"""

from __future__ import annotations

import numpy as np
import pytest
import shared_kernels

cp = pytest.importorskip("cupy", reason="CuPy is not installed")

pytestmark = pytest.mark.gpu


def test_cached_scale_kernel() -> None:
    kernel = shared_kernels.CACHE[
        "scale"
    ]  # BUG: should call shared_kernels.compile_kernel("scale")
    x = cp.arange(10, dtype=cp.float32)
    y = cp.empty_like(x)
    kernel((1,), (32,), (x, y, np.float32(3.0), np.int32(x.size)))
    np.testing.assert_array_equal(y.get(), np.arange(10, dtype=np.float32) * 3)
