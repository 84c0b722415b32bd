"""kernels.weighted_sum (weights @ V) against a float64 NumPy reference."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
from gpu_reference import assert_close, softmax_ref

import kernels

pytestmark = pytest.mark.gpu

DTYPES = ["float32", "float16"]


# (leading axes, M, K, N): odd sizes, partial tiles, no leading axes, a long K.
CASES = [
    ((1, 1), 1, 1, 1),
    ((2, 3), 3, 5, 40),
    ((1, 2), 127, 129, 80),
    ((2, 2), 64, 300, 128),
    ((), 200, 17, 64),
    ((1, 1), 1024, 4096, 64),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_reference(
    cp: ModuleType, dtype: str, case: tuple[tuple[int, ...], int, int, int]
) -> None:
    lead, m, k, n = case
    rng = np.random.default_rng(3)
    # attention-like weights: each row is a probability distribution
    weights = softmax_ref(rng.standard_normal((*lead, m, k))).astype(dtype)
    v = rng.standard_normal((*lead, k, n)).astype(dtype)
    out = kernels.weighted_sum(cp.asarray(weights), cp.asarray(v))
    assert out.shape == (*lead, m, n)
    expected = weights.astype(np.float64) @ v.astype(np.float64)
    assert_close(out.get(), expected, dtype)


@pytest.mark.parametrize("shapes", [((0, 4, 5), (0, 5, 3)), ((2, 0, 5), (2, 5, 3))], ids=str)
def test_empty_batch(cp: ModuleType, shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    out = kernels.weighted_sum(cp.empty(shapes[0], cp.float32), cp.empty(shapes[1], cp.float32))
    assert out.shape == (shapes[0][0], shapes[0][1], 3)


def test_empty_reduction_gives_zeros(cp: ModuleType) -> None:
    out = kernels.weighted_sum(cp.empty((2, 3, 0), cp.float32), cp.empty((2, 0, 4), cp.float32))
    np.testing.assert_array_equal(out.get(), np.zeros((2, 3, 4), np.float32))


def test_rejects_mismatched_inner_dim(cp: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"weights \(2, 3, 4\) and v \(2, 5, 6\)"):
        kernels.weighted_sum(cp.zeros((2, 3, 4), cp.float32), cp.zeros((2, 5, 6), cp.float32))


def test_rejects_non_contiguous_v(cp: ModuleType) -> None:
    v = cp.zeros((2, 6, 4), cp.float32).transpose(0, 2, 1)
    with pytest.raises(ValueError, match="v must be C-contiguous"):
        kernels.weighted_sum(cp.zeros((2, 3, 4), cp.float32), v)
