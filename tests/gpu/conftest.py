"""Skip every test in tests/gpu with one reason where CuPy or a CUDA GPU is missing.

Nothing here frees, resets or synchronises anything around the tests: leaks and
pollution between tests are what gpuci is there to find.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent


def find_gpu_problem() -> str | None:
    """Why the GPU tests cannot run here, or None where they can."""
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


GPU_PROBLEM = find_gpu_problem()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark this directory's tests skipped when the GPU is unusable."""
    if GPU_PROBLEM is None:
        return
    skip = pytest.mark.skip(reason=GPU_PROBLEM)
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(skip)


@pytest.fixture
def cp() -> ModuleType:
    """The cupy module (test modules do not import it, so they collect without CuPy)."""
    import cupy

    return cupy
