"""A large workspace: fails after test_b_allocator.py::test_caps_memory_fraction."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
common_utils = pytest.importorskip("torch.testing._internal.common_utils")


def test_small_workspace() -> None:
    assert torch.zeros(1 << 10, device="cuda").sum().item() == 0


def test_large_workspace() -> None:
    # 2 GiB: over the cap test_caps_memory_fraction leaves behind on a GPU of up to 200 GB
    workspace = torch.empty(1 << 29, device="cuda")
    workspace.fill_(1.0)
    assert workspace[-1].item() == 1.0
