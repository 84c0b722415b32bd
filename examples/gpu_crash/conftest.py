"""Skip with one reason where CuPy or a GPU is missing; free nothing behind the tests."""

from __future__ import annotations

import pytest


def find_gpu_problem() -> str | None:
    """Why these tests cannot run here, or None where they can."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed"
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            return "no CUDA GPU: cudaGetDeviceCount() returned 0"
    except Exception as exc:  # CUDARuntimeError, or no driver library
        return f"no CUDA GPU: {exc}"
    return None


GPU_PROBLEM = find_gpu_problem()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip everything, with the reason, when the GPU is unusable."""
    if GPU_PROBLEM is not None:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=GPU_PROBLEM))
