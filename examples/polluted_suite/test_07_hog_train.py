"""A training step that needs most of the device: 40% for weights, held throughout,
plus a 35% workspace each step (75% at peak).

Alone, or one file after another, it fits. Beside test_08_hog_infer.py (another
process, the same device) both hold their weights (80%) and no workspace fits, so
every step that overlaps runs out of memory in both: both fail, whichever started first.
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


def test_train_steps() -> None:
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
@pytest.mark.parametrize("batch", [1, 2, 4, 8])
def test_small_batch_fits(batch: int) -> None:
    with fakegpu.device_malloc(batch * 1024, wait_s=WORKSPACE_WAIT_S):
        pass
