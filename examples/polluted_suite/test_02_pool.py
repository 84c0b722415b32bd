"""The memory pool: stale blocks, and a pool limit left behind.

Each polluter passes; the test after it in this file fails, and passes alone.
"""

from __future__ import annotations

import fakegpu
import pytest

PAD_TO = 8


def test_fill_and_release() -> None:
    # Leaves a freed 8-element block full of data in the pool (correct in itself).
    buf = fakegpu.asarray(range(100, 100 + PAD_TO))
    assert fakegpu.total(buf) == sum(range(100, 100 + PAD_TO))


def test_pad_to_multiple() -> None:
    # `pad` never writes the padding: zeros on a fresh block, stale data on a reused one.
    padded = fakegpu.pad(fakegpu.asarray([1.0, 2.0, 3.0]), PAD_TO)
    assert padded.tolist() == [1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_oom_above_pool_limit() -> None:
    # Sets a process-wide limit to provoke an OOM and forgets to restore it.
    pool = fakegpu.get_default_memory_pool()
    pool.set_limit(size=1 << 20)
    with pytest.raises(fakegpu.OutOfMemoryError):
        fakegpu.empty(1 << 18)  # 2 MiB


def test_large_batch() -> None:
    # 4 MiB: fine on a fresh pool, over the 1 MiB limit the test above left behind.
    batch = fakegpu.zeros(1 << 19)
    assert fakegpu.total(batch) == 0.0
