"""Batched inference that needs most of the device: 40% for weights, held throughout,
plus a 35% workspace each step (75% at peak).

Alone, or one file after another, it fits. Beside test_07_hog_train.py (another
process, the same device) both hold their weights (80%) and no workspace fits: both
fail, whichever started first. Whether the two overlap is not left to the clock: they
meet through `hogs.py` (its docstring says how), so a loaded machine changes nothing.

The file ends with a kernel that hangs until gpuci's --timeout kills the interpreter
(fakegpu gives up after a minute, so nothing hangs forever). It is here, not in a file
of its own, so that this is the longest file in any earlier run's durations: a
longest-first scheduler then starts both hog files at once, even with two workers.
"""

from __future__ import annotations

import fakegpu
import hogs
import pytest

WORKSPACE_WAIT_S = 0.1  # the small steps' wait for memory


# First in its file: an interpreter of this file is a contender for the device.
@hogs.hog("infer")
def test_batched_inference() -> None:
    assert not hogs.contend("infer", partners=("train",)), hogs.MESSAGE


# Small steps that fit beside anything. They also make this one of the files with the
# most tests, so that without earlier durations (a first check orders by tests per file)
# a longest-first scheduler still starts both hog files first, together.
@pytest.mark.parametrize("batch", [1, 2])
def test_small_batch_fits(batch: int) -> None:
    with fakegpu.device_malloc(batch * 1024, wait_s=WORKSPACE_WAIT_S):
        pass


def test_wait_for_stuck_kernel() -> None:
    done = fakegpu.Event()  # the kernel that should record it spins forever
    done.synchronize()


def test_after_hang() -> None:
    # Runs in the fresh interpreter gpuci resumes with after the timeout.
    done = fakegpu.Event()
    done.record()
    done.synchronize()
