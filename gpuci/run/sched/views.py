"""GPU views: which GPUs each interpreter of a check sees (its CUDA_VISIBLE_DEVICES).

The plain run the check replaces sees every GPU the check uses, in their order: so do the
suite interpreter, isolated and every evidence run, and so their commands can be pasted. Only
the parallel and threads slots are spread: every slot sees every GPU rotated (as CuPy's CI
spreads xdist workers: a single-GPU test runs on a different device per slot, a multi-GPU
test sees as many as anywhere), or, under `--gpus-per-slot N`, a window of N GPUs, each
slot's window starting where the last one's ended, so that no GPU is left idle.

A test that needs more GPUs than its slot saw fails there with the CUDA runtime's "invalid
device ordinal"; such a failure is not the slot's finding: the test runs where every GPU is
visible (the suite interpreter, isolated), and its outcome comes from there.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from gpuci.model import NOT_PASSING, Outcome, TestResult

GPU_LIMIT_ENV = "CUPY_TEST_GPU_LIMIT"  # cupy.testing.multi_gpu(n) skips where it is below n
# what CUDA (through CuPy or PyTorch) says when a test asks for a device it cannot see
DEVICE_UNSEEN = re.compile(
    r"invalid device ordinal|cudaErrorInvalidDevice|CUDA_ERROR_INVALID_DEVICE", re.IGNORECASE
)


def plain_gpus(gpus: Sequence[str]) -> str | None:
    """What the plain run sees: every GPU the check uses, in order (None: no pinning)."""
    return ",".join(gpus) if gpus else None


def visible_gpus(
    gpus: Sequence[str], slots: int, per_slot: int | None = None
) -> tuple[str | None, ...]:
    """CUDA_VISIBLE_DEVICES of each of `slots` slots that run files side by side.

    Every GPU: slot k sees the set rotated to start at GPU k. A window: slot k sees the
    `per_slot` GPUs from GPU k·per_slot on, wrapped, so that 3 GPUs in windows of 2 are all
    used ((0,1), (2,0), (1,2)). Slot 0 of a rotation is the plain run's view.
    """
    if not gpus:
        return (None,) * slots
    n = len(gpus)
    step, width = (1, n) if per_slot is None else (per_slot, per_slot)
    return tuple(",".join(gpus[(k * step + i) % n] for i in range(width)) for k in range(slots))


def screen_gpus(
    gpus: Sequence[str], slots: int, per_slot: int | None, *, suite: bool, orders: int = 0
) -> tuple[str | None, ...]:
    """The screens' slots: slot 0 is the suite interpreter's where it runs (every GPU, as
    the plain run sees them); the next `orders` slots run the whole suite in another order
    (reversed, shuffled): every GPU too, for its multi-GPU tests, rotated so that its first
    device is one the suite interpreter's first is not, where there are two or more; the
    others run files (`visible_gpus`, starting at their slot's view so that the files'
    first slot is not on the suite's first GPU)."""
    views = visible_gpus(gpus, slots, per_slot)
    whole = visible_gpus(gpus, slots)  # every GPU, slot k's first device GPU k (wrapped)
    first = 1 if suite and views else 0
    return (
        *((plain_gpus(gpus),) if first else ()),
        *whole[first : first + orders],
        *views[first + orders :],
    )


def describe_views(views: Sequence[str | None]) -> str:
    """The GPUs a mode's slots see, for its plan line: one set, or each slot's."""
    distinct = list(dict.fromkeys(views))
    if len(distinct) == 1:
        return f"GPUs {distinct[0]}"
    shown = " | ".join(str(v) for v in views[:8]) + (" | ..." if len(views) > 8 else "")
    return f"GPUs by slot {shown}"


def first_gpus_note(views: Sequence[str | None]) -> str:
    """Which device each side of a pair ran on first (CUDA's device 0 of its view): where
    they differ, two tests that contend for one device's memory may never meet there."""
    firsts = list(dict.fromkeys(v.split(",")[0] for v in views if v))
    if not firsts:
        return ""
    if len(firsts) == 1:  # a pair beside all its candidates at once has more than two
        sides = "both sides" if len(views) <= 2 else f"all {len(views)} sides"
        return f"{sides} on GPU {firsts[0]} first"
    return f"the sides on different GPUs first ({', '.join(firsts)}): they shared no first device"


def window_env(view: str | None, gpus: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """What a slot whose window is narrower than the check's GPUs adds to its environment:
    CuPy's own GPU limit (`CUPY_TEST_GPU_LIMIT`, as CuPy's CI sets it for xdist workers), so
    that its multi-GPU tests skip there rather than fail or hang on a device they cannot
    see; they run where every GPU is visible. Never where the user set the limit."""
    seen = count_gpus(view)
    if seen is None or seen >= len(gpus) or GPU_LIMIT_ENV in environ:
        return {}
    return {GPU_LIMIT_ENV: str(seen)}


def count_gpus(view: str | None) -> int | None:
    """How many GPUs a CUDA_VISIBLE_DEVICES view names (None: unpinned, all of them)."""
    return None if view is None else len([g for g in view.split(",") if g.strip()])


def wanting_gpus(
    results: Sequence[TestResult], view: str | None, gpus: Sequence[str]
) -> list[TestResult]:
    """`results` of an interpreter that saw `view`, where a test that failed for want of a
    device its view left out is not run here (it runs where every GPU is visible)."""
    seen = count_gpus(view)
    if seen is None or seen >= len(gpus):
        return list(results)
    why = (
        f"not run here: it asked for a GPU this slot did not see (CUDA_VISIBLE_DEVICES={view},"
        f" {seen} of the check's {len(gpus)}); it runs where all {len(gpus)} are visible"
        " (suite, isolated), and its outcome comes from there"
    )
    return [
        dataclasses.replace(r, outcome=Outcome.NOT_RUN, message=f"{why}. Here: {r.message}")
        if r.outcome in NOT_PASSING and DEVICE_UNSEEN.search(r.message)
        else r
        for r in results
    ]
