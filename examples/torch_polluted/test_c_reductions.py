"""Reductions against a float64 reference: they pass everywhere."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
common_utils = pytest.importorskip("torch.testing._internal.common_utils")


@pytest.mark.parametrize("n", [1, 7, 64, 1000, 4096, 65536])
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_reduction_matches_float64(n: int, op: str) -> None:
    x = torch.rand(n, device="cuda")
    want = getattr(x.double(), op)().float()
    torch.testing.assert_close(getattr(x, op)(), want, rtol=1e-4, atol=1e-4)
