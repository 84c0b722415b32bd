"""Matrix products against a float64 reference: they pass everywhere."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
# what makes a fresh interpreter of this suite expensive: PyTorch's own test utilities
# (15-20 s of imports, and CUDA initialized at import where a GPU is present)
common_utils = pytest.importorskip("torch.testing._internal.common_utils")


@pytest.mark.parametrize("n", [1, 2, 3, 8, 17, 64, 128, 255])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_matmul_matches_float64(n: int, dtype: str) -> None:
    a = torch.rand(n, n, device="cuda", dtype=getattr(torch, dtype))
    b = torch.rand(n, n, device="cuda", dtype=getattr(torch, dtype))
    want = (a.double() @ b.double()).to(a.dtype)
    torch.testing.assert_close(a @ b, want, rtol=2e-2, atol=2e-2 * n)
