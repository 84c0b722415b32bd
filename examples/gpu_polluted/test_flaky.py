"""flaky: a stand-in for a reduction whose result depends on the order its atomics
land in. To make the flakiness deterministic it alternates fail, pass, fail, ...
through an on-disk counter, so two alone-reruns in a row always disagree.

The counter lives in $GPU_POLLUTED_STATE (default: <tmp>/gpu_polluted_state).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed")

pytestmark = pytest.mark.gpu

STATE_DIR = Path(
    os.environ.get("GPU_POLLUTED_STATE", Path(tempfile.gettempdir()) / "gpu_polluted_state")
)


def next_run_number() -> int:
    """How many times this test ran before, counting this run."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    counter = STATE_DIR / "test_flaky.count"
    runs = int(counter.read_text()) if counter.exists() else 0
    tmp = counter.with_suffix(".tmp")
    tmp.write_text(str(runs + 1))
    tmp.replace(counter)  # atomic: a killed run leaves the old count, not half a file
    return runs


def test_atomic_sum_is_exact() -> None:
    run = next_run_number()
    x = cp.full(4096, 0.1, dtype=cp.float32)
    total = float(x.sum())
    # Every other run the "atomics" land in an order that loses one ulp at the end.
    if run % 2 == 0:
        total = float(np.nextafter(np.float32(total), np.float32(0)))
    assert total == float(cp.full(4096, 0.1, dtype=cp.float32).sum())
