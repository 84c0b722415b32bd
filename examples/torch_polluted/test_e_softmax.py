"""A softmax kernel with a real bug: it drops the last column. Fails everywhere, the same way."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
common_utils = pytest.importorskip("torch.testing._internal.common_utils")


def softmax_rows(x: "torch.Tensor") -> "torch.Tensor":
    e = torch.exp(x - x.max(dim=1, keepdim=True).values)
    e[:, -1] = 0  # the bug: the last column never written
    return e / e.sum(dim=1, keepdim=True)


@pytest.mark.parametrize("cols", [2, 3, 16, 100, 1000, 4096])
def test_softmax_rows(cols: int) -> None:
    x = torch.rand(8, cols, device="cuda")
    torch.testing.assert_close(softmax_rows(x), torch.softmax(x, dim=1))
