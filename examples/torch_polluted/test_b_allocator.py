"""The caching allocator's settings: test_caps_memory_fraction leaves a cap behind."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
common_utils = pytest.importorskip("torch.testing._internal.common_utils")


@pytest.mark.parametrize("mib", [1, 4, 16, 64])
def test_blocks_hold_what_was_written(mib: int) -> None:
    block = torch.full((mib << 18,), 2.0, device="cuda")  # float32: mib MiB
    assert block.sum().item() == 2.0 * (mib << 18)


def test_caps_memory_fraction() -> None:
    # the planted bug: a per-process cap of 1% of the device, never restored (it passes)
    torch.cuda.set_per_process_memory_fraction(0.01)
    assert torch.empty(1 << 20, device="cuda").numel() == 1 << 20


@pytest.mark.parametrize("mib", [1, 8])
def test_empty_cache_returns_blocks(mib: int) -> None:
    block = torch.empty(mib << 18, device="cuda")
    held = torch.cuda.memory_reserved()
    del block
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() <= held - (mib << 20)
