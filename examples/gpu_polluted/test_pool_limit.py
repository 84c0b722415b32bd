"""order-dependent: test_fits_in_budget caps CuPy's memory pool and never lifts the
cap; test_large_workspace, after it in the same interpreter, then runs out of
memory. Alone, test_large_workspace passes.
"""

from __future__ import annotations

import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed")

pytestmark = pytest.mark.gpu

BUDGET = 128 * 1024 * 1024


def test_fits_in_budget() -> None:
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()  # measure from an empty pool
    pool.set_limit(size=BUDGET)  # BUG: never reset (pool.set_limit(size=0) in a finally)
    x = cp.ones(BUDGET // 8, dtype=cp.float32)  # half the budget
    assert float(x.sum()) == BUDGET // 8


def test_large_workspace() -> None:
    x = cp.zeros(512 * 1024 * 1024 // 4, dtype=cp.float32)  # 512 MiB
    assert float(x.sum()) == 0.0
