"""Providers: which earlier test (or collected file) a test that depends on others needs,
the smallest set with which it passes.

- the earlier tests or files its failure points at first (`gpuci.evidence.search.hinted`:
  the files that brought a module its failure names, or the tests whose source writes a
  value it quotes);
- then the suite's other files collected with it, none of their tests run
  (`gpuci.evidence.kinds.provider_search.collected`): where it passes so, their smallest
  set;
- else the tests before it where it passed halved, keeping a half after which it passes,
  down to the smallest set (`gpuci.evidence.search.bisect`).

The round's victims are searched interpreter by interpreter, side by side
(`gpuci.evidence.search.schedule`). Every answer is confirmed by a second identical run;
where that run goes the other way, the victim is flaky and nothing is named. Every run
counts against the budget and is kept as a `Probe`; a search the budget cut says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from gpuci.evidence.classify import Classified
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.provider_search.collected import collected_first, withdraw_collected
from gpuci.evidence.notes import NOT_REPRODUCED
from gpuci.evidence.search.bisect import bisect
from gpuci.evidence.search.hinted import hint_tasks, hinted_first
from gpuci.evidence.search.schedule import search_in_waves, with_searches
from gpuci.evidence.search.step import Search
from gpuci.evidence.victims import Task, plan_searches
from gpuci.model import Category, TestEvidence


def search_providers(
    ctx: Context,
    classified: Mapping[str, Classified],
    found: Mapping[str, TestEvidence],
    *,
    only: Collection[str] | None = None,
    searched: set[str] | None = None,
) -> dict[str, TestEvidence]:
    """The providers of every depends-on-others victim (of those `only`, where given),
    added to the evidence by test id. `searched` hears of every test searched."""
    depending = Category.DEPENDS_ON_OTHERS
    tasks = hint_tasks(ctx, plan_searches(ctx, classified, found, category=depending, only=only))
    if not tasks:
        return dict(found)

    def search(task: Task, roots: list[tuple[str, ...]]) -> Search:
        return _search(ctx, task)  # a provider is no earlier victim's culprit: no cascade

    searches = search_in_waves(ctx, tasks, search, what="providers")
    if searched is not None:
        searched.update(searches)
    return with_searches(found, searches, only)


def _search(ctx: Context, task: Task) -> Search:
    if "::" not in task.victim:  # a file's import: only other files' imports come before it
        return collected_first(ctx, task, lambda: Search([], note=NOT_REPRODUCED))
    if task.hinted:
        # its failure names what a few earlier tests' source writes: those before all else
        unhinted = dataclasses.replace(task, hinted=(), hint="")
        hinted = hinted_first(ctx.prober, task, rest=lambda: _search(ctx, unhinted))
        if hinted is not None:
            if hinted.culprits:  # the hint's runs answered: none with the files collected
                withdraw_collected(ctx, task.victim)
            return hinted
    # a file's import may be what it needs: the suite's other files collected first, a
    # run that costs no test of theirs
    return collected_first(ctx, task, lambda: bisect(ctx.prober, task))
