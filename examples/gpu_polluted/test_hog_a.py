"""concurrency: takes 40% of the GPU's memory, holds it ~3 s, and halfway through
asks for another 25% as a workspace. Alone that fits (65%); with its twin
(test_hog_b.py) running beside it in another interpreter, 80% is taken
before either asks for its workspace, and both run out of memory. These are the
longest files of the suite, so a longest-first scheduler starts them together.
"""

from __future__ import annotations

import time

import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed")

pytestmark = pytest.mark.gpu

HOLD_S = 1.5  # before and after asking for the workspace


def test_hold_most_memory() -> None:
    _free, total = cp.cuda.runtime.memGetInfo()
    working_set = cp.empty(int(total * 0.40) // 4, dtype=cp.float32)
    time.sleep(HOLD_S)
    error = ""
    try:
        workspace = cp.empty(int(total * 0.25) // 4, dtype=cp.float32)
    except cp.cuda.memory.OutOfMemoryError as exc:
        error = str(exc)
    else:
        del workspace
    time.sleep(HOLD_S)  # keep holding either way, so the twin's request fails too
    del working_set
    assert not error, f"workspace allocation failed: {error}"


# Small allocations that fit beside anything. They also make this one of the files with
# the most tests, so that without earlier durations (a first check orders by tests per
# file) a longest-first scheduler still starts both hog files first, together.
@pytest.mark.parametrize("elements", [1, 1024, 1 << 20])
def test_small_allocation_fits(elements: int) -> None:
    assert int(cp.ones(elements, dtype=cp.float32).sum()) == elements
