"""A module-level cache of compiled kernels, shared by the test files.

``compile_kernel`` is the way in; reading ``CACHE`` directly is the planted bug of
test_cache.py (it only works after some other test compiled the kernel).
"""

from __future__ import annotations

from typing import Any

import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed")

SOURCES = {
    "scale": r"""
extern "C" __global__ void scale(const float* x, float* y, float factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * factor;
}
""",
}

CACHE: dict[str, Any] = {}


def compile_kernel(name: str) -> Any:
    """Compile (once) and return the kernel ``name``; it lands in CACHE."""
    if name not in CACHE:
        kernel = cp.RawKernel(SOURCES[name], name)
        kernel.compile()
        CACHE[name] = kernel
    return CACHE[name]
