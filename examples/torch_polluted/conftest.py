"""Skip the whole example suite with one reason where PyTorch or a CUDA GPU is missing."""

from __future__ import annotations

import pytest


def find_gpu_problem() -> str | None:
    """Why these tests cannot run here, or None where they can."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU: torch.cuda.is_available() is False"
    return None


GPU_PROBLEM = find_gpu_problem()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test skipped when the GPU is unusable."""
    if GPU_PROBLEM is not None:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=GPU_PROBLEM))
