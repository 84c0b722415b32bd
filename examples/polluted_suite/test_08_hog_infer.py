"""Batched inference that needs most of the device: 40% for weights, held throughout,
plus a 35% workspace per batch (75% at peak).

Alone, or one file after another, it fits. Beside test_07_hog_train.py (another
process, the same device) both hold their weights (80%) and no workspace fits, so
every step that overlaps runs out of memory in both: both fail, whichever started first.

The file ends with a kernel that hangs until gpuci's --timeout kills the interpreter
(fakegpu gives up after a minute, so nothing hangs forever). It is here, not in a file
of its own, so that this is the longest file in any earlier run's durations: a
longest-first scheduler then starts both hog files at once, even with two workers.
"""

from __future__ import annotations

import time

import fakegpu
import pytest

WEIGHTS = fakegpu.DEVICE_BYTES * 40 // 100
WORKSPACE = fakegpu.DEVICE_BYTES * 35 // 100
STEPS = 10
STEP_S = 0.1  # how long a step holds its workspace
GAP_S = 0.05
# Waiting briefly rides out a neighbour's short allocation, but not one that lasts
# as long as this whole test.
WORKSPACE_WAIT_S = 0.1
WEIGHTS_WAIT_S = 1.0


def test_batched_inference() -> None:
    out_of_memory: list[str] = []
    with fakegpu.device_malloc(WEIGHTS, wait_s=WEIGHTS_WAIT_S):
        for _ in range(STEPS):
            try:
                with fakegpu.device_malloc(WORKSPACE, wait_s=WORKSPACE_WAIT_S):
                    time.sleep(STEP_S)
            except fakegpu.OutOfMemoryError as error:
                out_of_memory.append(str(error))
            time.sleep(GAP_S)
    assert not out_of_memory, f"{len(out_of_memory)}/{STEPS} steps: {out_of_memory[0]}"


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
