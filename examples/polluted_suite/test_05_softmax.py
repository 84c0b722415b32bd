"""Softmax through the kernel cache, which `launch` only reads and never fills.

It passes only in an interpreter where test_04_compile.py already compiled softmax:
in `suite` mode, as in a plain `pytest` run of the whole suite. Run on its own file,
or alone, it fails.
"""

from __future__ import annotations

import math

import fakegpu


def test_softmax_rows() -> None:
    out = fakegpu.launch("softmax", fakegpu.asarray([1.0, 2.0, 3.0])).tolist()
    assert math.isclose(sum(out), 1.0)
    assert out == sorted(out)
