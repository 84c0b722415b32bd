"""The kernel cache: this file compiles softmax, test_05_softmax.py silently relies on it."""

from __future__ import annotations

import fakegpu


def test_compile_softmax() -> None:
    fakegpu.compile_kernel("softmax")
