"""Collected files: a depends-on-others victim run with the suite's other files collected
(imported) and none of their tests run, before any replay of the tests before it.

pytest imports every file it was handed before the first test runs, so a file whose import
sets up what the victim needs makes it pass in the suite wherever that file stands in the
order, and a replay of the tests before it would name one of that file's tests, or none
where the file comes later. (CuPy v14.2.0's
`test_init.py::TestShowConfig::test_show_config_with_handles` passes only where a file that
imports `cupy.cuda.nccl`, which preloads NCCL, was collected with it.) Where it passes so,
the files are halved as the tests are (`gpuci.evidence.search.bisect`),
keeping a part with which it passes, down to the smallest set; the answer is confirmed
twice, fresh. One run, and no test of theirs, where it does not. Where start-ups are worth
hiding the halving's first runs start while that run goes on (three start-ups one after
another would cost far more than the short test each runs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from gpuci.evidence.context import Context
from gpuci.evidence.notes import NOT_REPRODUCED, SAME_RUN_BOTH_WAYS
from gpuci.evidence.orders import collected_files
from gpuci.evidence.requests import Request
from gpuci.evidence.search.bisect import bisect
from gpuci.evidence.search.step import Search, probe_after
from gpuci.evidence.search.waves import plan_wave
from gpuci.evidence.victims import Task
from gpuci.model import Category

BY_COLLECTION = "collection"  # a search over collected files: the start of its note


def collected_first(ctx: Context, task: Task, replay: Callable[[], Search]) -> Search:
    """A depends-on-others victim with the suite's other files collected: where it passes,
    the smallest set of them with which it does (its providers, files); where it does not,
    `replay`'s search, after that one run."""
    prober = ctx.prober
    files = collected_files(ctx.results, task.victim)
    if task.category is not Category.DEPENDS_ON_OTHERS or not files or prober.exhausted():
        return replay()
    tried = Search([])
    prober.start_ahead(collected_requests(ctx, task.victim))  # where not yet
    if probe_after(prober, task, tried, files):
        # that run is the halving's first: with one file, what is left is its confirmation
        found = bisect(prober, dataclasses.replace(task, candidates=files), tried, shown=True)
        if found.culprits:
            shown = ", ".join(found.culprits)
            found.note = (
                f"{BY_COLLECTION}: it passes where pytest has imported {shown} (collected,"
                f" none of its tests run), {len(found.probes)} run(s)"
            )
        return found
    search = replay()
    search.probes[:0] = tried.probes
    if search.note.startswith(NOT_REPRODUCED) and SAME_RUN_BOTH_WAYS not in search.note:
        search.note += f"; nor with the suite's other {len(files)} file(s) collected"
    return search


def collected_requests(ctx: Context, victim: str) -> list[Request]:
    """Where start-ups are worth hiding, a depends-on-others search's first runs, to start
    ahead (`_first_runs`). A run not taken is killed at the end."""
    return [
        Request(ids=(victim,), collect=tuple(collect), copies=copies)
        for collect, copies in _first_runs(ctx, victim)
    ]


def withdraw_collected(ctx: Context, victim: str) -> None:
    """`collected_requests`' interpreters ended: the victim's search needed none of them (its
    hint named the provider)."""
    for collect, copies in _first_runs(ctx, victim):
        for _ in range(copies):
            ctx.prober.withdraw([victim], collect=collect)


def _first_runs(ctx: Context, victim: str) -> list[tuple[tuple[str, ...], int]]:
    """The files collected in each of a depends-on-others search's first runs, and how
    many of each: the run with the suite's other files, and the halving's first wave (one
    file: that run's confirmation, the same run); none where start-ups are not worth
    hiding."""
    files = collected_files(ctx.results, victim)
    if not ctx.prober.hides_start_ups or not files:
        return []
    wave = plan_wave(len(files), max(1, ctx.prober.admission.slots))
    return [
        (files, 1 if len(files) > 1 else 2),
        *((files[node.runs[0] : node.runs[1]], 1) for node in wave),
    ]
