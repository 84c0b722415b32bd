"""Skip the whole example suite with one reason where CuPy or a CUDA GPU is missing."""

from __future__ import annotations

import pytest


def find_gpu_problem() -> str | None:
    """Why these tests cannot run here, or None where they can."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError, or a missing driver library
        return f"no CUDA GPU: {exc}"
    if count == 0:
        return "no CUDA GPU: cudaGetDeviceCount() returned 0"
    return None


# Test modules import CuPy with pytest.importorskip(..., reason="CuPy is not installed"),
# so they still collect (as skipped) where it is missing.
GPU_PROBLEM = find_gpu_problem()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test skipped when the GPU is unusable."""
    if GPU_PROBLEM is None:
        return
    for item in items:
        item.add_marker(pytest.mark.skip(reason=GPU_PROBLEM))
