"""Plain kernels: two that work, one with a real bug, one the device cannot run."""

from __future__ import annotations

from itertools import accumulate

import fakegpu
import pytest


def test_vector_add() -> None:
    a = fakegpu.asarray([1.0, 2.0, 3.0])
    b = fakegpu.asarray([10.0, 20.0, 30.0])
    assert fakegpu.add(a, b).tolist() == [11.0, 22.0, 33.0]


def test_scale() -> None:
    a = fakegpu.asarray([1.0, -2.0, 0.5])
    assert fakegpu.scale(a, 4.0).tolist() == [4.0, -8.0, 2.0]


def test_inclusive_scan() -> None:
    # Fails everywhere, alone too: the kernel never accumulates its last element.
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert fakegpu.inclusive_scan(fakegpu.asarray(values)).tolist() == list(accumulate(values))


@pytest.mark.skipif(
    fakegpu.device_properties().compute_capability < (7, 0),
    reason="tensor cores need compute capability 7.0; the fake device has 6.0",
)
def test_tensor_core_matmul() -> None:
    raise AssertionError("unreachable: the fake device has no tensor cores")
