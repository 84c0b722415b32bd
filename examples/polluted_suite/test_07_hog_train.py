"""A training step that needs most of the device: 40% for weights, held throughout,
plus a 35% workspace each step (75% at peak).

Alone, or one file after another, it fits. Beside test_08_hog_infer.py (another
process, the same device) both hold their weights (80%) and no workspace fits: both
fail, whichever started first. Whether the two overlap is not left to the clock: they
meet through `hogs.py` (its docstring says how), so a loaded machine changes nothing.
"""

from __future__ import annotations

import fakegpu
import hogs
import pytest

WORKSPACE_WAIT_S = 0.1  # the small steps' wait for memory


# First in its file: an interpreter of this file is a contender for the device.
@hogs.hog("train")
def test_train_steps() -> None:
    assert not hogs.contend("train", partners=("infer",)), hogs.MESSAGE


# Small steps that fit beside anything. They also make this one of the files with the
# most tests, so that without earlier durations (a first check orders by tests per file)
# a longest-first scheduler still starts both hog files first, together.
@pytest.mark.parametrize("batch", [1, 2, 4, 8])
def test_small_batch_fits(batch: int) -> None:
    with fakegpu.device_malloc(batch * 1024, wait_s=WORKSPACE_WAIT_S):
        pass
