"""Batched reductions. Nothing here pollutes anything; in `suite` mode the large one
fails anyway, because test_02_pool.py left a 1 MiB pool limit in the interpreter."""

from __future__ import annotations

import fakegpu


def test_reduce_small_batch() -> None:
    batch = fakegpu.asarray([0.5] * 64)  # 512 bytes: under any limit left behind
    assert fakegpu.total(batch) == 32.0


def test_reduce_large_batch() -> None:
    batch = fakegpu.asarray([0.25] * (1 << 20))  # 8 MiB
    assert fakegpu.total(batch) == float(1 << 18)
