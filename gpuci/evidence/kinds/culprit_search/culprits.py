"""Culprits: which earlier test breaks an order-dependent victim, found by replaying the
interpreter it failed in, in pieces.

- the tests its failure points at first (`gpuci.evidence.search.hinted`), then the culprits
  found for the earlier victims of its interpreter (a cascade: a sticky CUDA error, a leaked
  pool limit, one root with its victims), then the tests before it where it failed halved,
  keeping a half after which it still fails, down to the smallest set
  (`gpuci.evidence.search.bisect`);
- where a replay never shows it, or where it ran the device out of memory in the parallel
  screen with nothing before it pointed at, the files that ran beside it there
  (`gpuci.evidence.pairs`): a test of that file that failed the victim's way beside it is
  its partner, and names it.

The round's victims are searched interpreter by interpreter, in waves
(`gpuci.evidence.search.schedule`). Every answer is confirmed by a second identical run;
where that run goes the other way, the victim is flaky and nothing is named, unless the
steps were beside others: then the search runs again, strictly. Every run counts against
the budget and is kept as a `Probe`; a search the budget cut says so. A concurrency
victim's pairs are the pairs kind's (`gpuci.evidence.kinds.pairs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from gpuci.evidence.classify import Classified
from gpuci.evidence.context import Context
from gpuci.evidence.notes import NOT_REPRODUCED, SAME_RUN_BOTH_WAYS
from gpuci.evidence.pairs import Partnerable, pair_victim
from gpuci.evidence.probe import Prober
from gpuci.evidence.results import ModeResults
from gpuci.evidence.search.bisect import bisect, cascade
from gpuci.evidence.search.hinted import hint_tasks, hinted_first
from gpuci.evidence.search.schedule import search_in_waves, with_searches
from gpuci.evidence.search.step import Search
from gpuci.evidence.victims import Task, plan_searches
from gpuci.model import Category, Mode, TestEvidence
from gpuci.run.proc.discover import file_of


def search_culprits(
    ctx: Context,
    classified: Mapping[str, Classified],
    found: Mapping[str, TestEvidence],
    *,
    only: Collection[str] | None = None,
    searched: set[str] | None = None,
) -> dict[str, TestEvidence]:
    """The culprits of every order-dependent victim (of those `only`, where given), added
    to the evidence by test id. `searched` hears of every test searched (a pair's partner
    too)."""
    planned = plan_searches(ctx, classified, found, category=Category.ORDER_DEPENDENT, only=only)
    tasks = hint_tasks(ctx, planned)
    if not tasks:
        return dict(found)
    partnerable = Partnerable.of(classified)
    parallel = ctx.results.get(Mode.PARALLEL)

    def search(task: Task, roots: list[tuple[str, ...]]) -> Search:
        return _replay(ctx.prober, parallel, task, roots, partnerable)

    searches = search_in_waves(ctx, tasks, search, what="culprits")
    if searched is not None:
        searched.update(searches)
    return with_searches(found, searches, only)


def _replay(
    prober: Prober,
    parallel: ModeResults | None,
    task: Task,
    roots: list[tuple[str, ...]],
    partnerable: Partnerable,
) -> Search:
    """An interpreter's victim: known culprits first, then halving; where the replay never
    showed it, the files that ran beside it in the parallel screen (those first where it
    ran the device out of memory there with nothing before it pointed at)."""
    if (
        parallel is not None
        and task.loadable
        and task.pairs
        and task.device_oom
        and not any(file_of(t) == file_of(task.victim) for t in task.hinted)
    ):
        # out of device memory in the parallel screen, after its own file's tests only, where
        # none of them left memory held or a limit set (the ledger points at none of them;
        # a hint at another file's test can explain only the suite interpreter's failure):
        # another interpreter held it, so its pairs come first, its replay after them
        paired = _paired_with_co_runners(prober, parallel, task, partnerable)
        if paired.culprits or SAME_RUN_BOTH_WAYS in paired.note:
            return paired
        replay = _replayed(prober, task, roots)
        replay.probes[:0] = paired.probes
        replay.note = f"{replay.note}; first {paired.note}"
        return replay
    search = _replayed(prober, task, roots)
    # a replay that went both ways made it flaky: no pair can say otherwise; nor can one
    # where it ran out of memory under a pool limit (its process's own state)
    if (
        parallel is not None
        and task.pairs
        and not task.pool_oom
        and search.note.startswith(NOT_REPRODUCED)
        and SAME_RUN_BOTH_WAYS not in search.note
    ):
        return _paired_instead(prober, parallel, task, search, partnerable)
    return search


def _replayed(prober: Prober, task: Task, roots: list[tuple[str, ...]]) -> Search:
    """The failing interpreter's tests replayed before the victim: what its failure points
    at first (it names this victim's own culprit, where a cascade guesses an earlier
    victim's), then the earlier victims' culprits, then the halving."""
    return hinted_first(prober, task, roots) or cascade(prober, task, roots) or bisect(prober, task)


def _paired_instead(
    prober: Prober,
    parallel: ModeResults,
    task: Task,
    replay: Search,
    partnerable: Partnerable,
) -> Search:
    """A screen's order-dependent suspect whose replay showed nothing, paired instead with
    what ran beside it in the parallel screen: a pair that fails makes it concurrency."""
    paired = _paired_with_co_runners(prober, parallel, task, partnerable)
    if not paired.culprits:
        paired.note = f"{replay.note}; {paired.note}"
    paired.probes = replay.probes + paired.probes
    return paired


def _paired_with_co_runners(
    prober: Prober, parallel: ModeResults, task: Task, partnerable: Partnerable
) -> Search:
    """A screen's suspect paired with the files that ran beside it in the parallel screen
    (its task's `pairs`), not the tests before it."""
    return _pairs(prober, parallel, dataclasses.replace(task, candidates=task.pairs), partnerable)


def _pairs(prober: Prober, parallel: ModeResults, task: Task, partnerable: Partnerable) -> Search:
    """The victim beside the files that ran with it (`gpuci.evidence.pairs`)."""
    found = pair_victim(prober, parallel, task, partnerable)
    return Search(
        found.probes,
        culprits=found.culprits,
        note=found.note,
        partners=found.partners,
        partner_runs=found.partner_runs,
        pair_gpu=found.gpu,
    )
