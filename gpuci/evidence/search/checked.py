"""The checked halving: where an inferred halving was refuted
(`gpuci.evidence.search.bisect`), each level's parts run, up to MAX_PARTS at
once with slots to spare, keeping a part after which the victim shows its finding, or all of
them where none alone does (the finding needs tests of several). Every step is recorded in
the search (`gpuci.evidence.search.step`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from gpuci.evidence.probe import Prober
from gpuci.evidence.search.step import (
    Search,
    never_shown,
    probe_after,
    record,
    run_step,
)
from gpuci.evidence.victims import Task
from gpuci.model import NOT_PASSING

MAX_PARTS = 4  # a checked level's candidates run in at most this many parts at once


def checked_halving(
    prober: Prober, task: Task, search: Search, *, whole_shown: bool = False
) -> tuple[list[str], bool] | None:
    """The halving with every level checked, where an inferred one was refuted: the whole
    set first, unless a run of it showed the finding already (`whole_shown`; a victim that
    does not show it after all of them has nothing to find), then each level's parts,
    keeping one that shows it, or all of them where none does (the finding needs tests of
    several); the set and whether it needed several, or None (the note says why)."""
    current = list(task.candidates)
    if prober.exhausted() or not (whole_shown or probe_after(prober, task, search, current)):
        search.note = "search cut by budget" if prober.exhausted() else never_shown(task, search)
        return None
    while len(current) > 1:
        if prober.exhausted() or prober.stopping():
            search.note = (
                f"search cut by budget after {len(search.probes)} run(s),"
                f" down to {len(current)} of {len(task.candidates)} tests"
            )
            return None
        part = _split(prober, task, search, current)
        if part is None:
            return current, True  # no part alone: the finding needs tests from several
        current = part
    return current, False


def _split(prober: Prober, task: Task, search: Search, current: list[str]) -> list[str] | None:
    """The first part of `current` after which the victim shows the finding, or None. With
    slots to spare up to MAX_PARTS parts run at once: fewer levels, each replaying fewer
    tests, in about as many runs as halving (k runs a level, log_k(n) levels); where no
    part shows it, the halves (the finding may need tests of two parts). A victim the load
    may fail gets halves at once: more parts would fail by each other unevenly. Otherwise
    halves, the second only where the first does not show it."""
    if task.strict or prober.admission.slots < 2:
        return _one_by_one(prober, task, search, _parts(current, 2), strict=task.strict)
    parts = _parts(current, 2 if task.loadable else min(prober.admission.slots, MAX_PARTS))
    shown = _at_once(prober, task, search, parts)
    if shown is None and len(parts) > 2:
        shown = _at_once(prober, task, search, _parts(current, 2))
    return shown


def _parts(items: list[str], k: int) -> list[list[str]]:
    """`items` in `k` consecutive parts of nearly equal length (none empty)."""
    k = max(1, min(k, len(items)))
    size, extra = divmod(len(items), k)
    bounds = [i * size + min(i, extra) for i in range(k + 1)]
    return [items[a:b] for a, b in itertools.pairwise(bounds)]


def _at_once(
    prober: Prober, task: Task, search: Search, parts: Sequence[list[str]]
) -> list[str] | None:
    """Every part at once (each run is spent whether or not an earlier part shows it); the
    first that shows the finding. Where several fail beside each other the victim may be
    failing by the load (two of it at once, a test that contends for a device): those
    parts run again one by one, strictly."""
    with ThreadPoolExecutor(max_workers=len(parts)) as pool:
        steps = list(pool.map(lambda part: run_step(prober, task, part), parts))
    shown = [record(task, search, probe, ran) for probe, ran in steps]
    showing = [(part, step) for part, shows, step in zip(parts, shown, steps, strict=True) if shows]
    by_load = all(ran.beside and probe.outcome in NOT_PASSING for _, (probe, ran) in showing)
    if len(showing) > 1 and by_load:
        return _one_by_one(prober, task, search, [part for part, _ in showing], strict=True)
    return showing[0][0] if showing else None


def _one_by_one(
    prober: Prober,
    task: Task,
    search: Search,
    parts: Sequence[list[str]],
    *,
    strict: bool,
) -> list[str] | None:
    for part in parts:
        if probe_after(prober, task, search, part, strict=strict):
            return part
    return None
