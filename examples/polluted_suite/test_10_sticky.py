"""A sticky error: after one illegal memory access every later call in the process
raises, as in a poisoned CUDA context. The victims pass alone."""

from __future__ import annotations

import fakegpu

VALUES = [10.0, 20.0, 30.0, 40.0]


def test_gather_in_bounds() -> None:
    out = fakegpu.gather(fakegpu.asarray(VALUES), [3, 0])
    assert out.tolist() == [40.0, 10.0]


def test_gather_rotated() -> None:
    # Real bug, fails alone too: the index forgets `% len(VALUES)` and reads one past
    # the end, which poisons the context for the rest of the process.
    out = fakegpu.gather(fakegpu.asarray(VALUES), [i + 1 for i in range(len(VALUES))])
    assert out.tolist() == [*VALUES[1:], VALUES[0]]


def test_scale_after_fault() -> None:
    assert fakegpu.scale(fakegpu.asarray(VALUES), 0.5).tolist() == [5.0, 10.0, 15.0, 20.0]


def test_synchronize_after_fault() -> None:
    fakegpu.synchronize()
