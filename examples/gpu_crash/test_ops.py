"""Plain CuPy work that passes in every mode."""

from __future__ import annotations

import numpy as np


def test_matmul_matches_numpy() -> None:
    import cupy as cp

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((256, 128)), rng.standard_normal((128, 64))
    np.testing.assert_allclose(cp.asnumpy(cp.asarray(a) @ cp.asarray(b)), a @ b, rtol=1e-10)


def test_sum_of_squares() -> None:
    import cupy as cp

    x = cp.arange(1_000_000, dtype=cp.float64)
    assert float((x * x).sum()) == float(np.sum(np.arange(1_000_000, dtype=np.float64) ** 2))
