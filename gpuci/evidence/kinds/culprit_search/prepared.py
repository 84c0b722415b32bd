"""A culprit search's runs started ahead: the runs its searches will likely make, declared
to the runner (`gpuci.evidence.requests.Request`) before the search begins, where start-ups
are worth hiding (`Prober.hides_start_ups`); those a search will not need, ended.

- Before the alone-runs (`likely_searches`): a likely failing suspect that passed in the
  suite, were it to fail alone, depends on others: its hint's runs
  (`gpuci.evidence.kinds.culprit_search.hinted`) where its failure points at a few earlier
  tests, else its run with the suite's other files collected and the halving's first wave
  (`gpuci.evidence.kinds.culprit_search.collected`); where start-ups are expensive, every
  suspect's hinted runs, were it order-dependent. Ended where it passes alone
  (`withdraw_likely`).
- After them (`search_requests`): the victims' hinted runs and a bisection's within its
  own file; ended for a victim its poisoned runs diagnosed (`withdraw_diagnosed`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from gpuci.evidence.alone import Priorities
from gpuci.evidence.classify import Classified, classify_results
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.culprit_search.collected import collected_requests, withdraw_collected
from gpuci.evidence.kinds.culprit_search.hinted import (
    hint_tasks,
    hinted_requests,
    hinted_runs,
    withdraw_hinted,
)
from gpuci.evidence.probe import withdraw_each
from gpuci.evidence.requests import Request, added_up, requests_each
from gpuci.evidence.victims import Task, diagnosed, plan_searches
from gpuci.model import Category, Outcome, TestEvidence
from gpuci.run.proc.discover import file_of

Prepared = dict[str, list[tuple[list[str], int]]]  # by victim: the runs started, and copies


def likely_searches(
    ctx: Context, plan: Priorities, found: Mapping[str, TestEvidence]
) -> tuple[dict[str, Task], list[Request]]:
    """The searches of the likely failing suspects (`plan.likely_failing`), were they to
    fail alone, by victim, and their first runs; where start-ups are expensive, every
    suspect's hinted runs too, were it order-dependent."""
    if not ctx.prober.hides_start_ups:
        return {}, []
    likely = _depends_on_others(ctx, plan, found)
    searches = likely.values()  # where it passed in the suite
    # each search's runs need interpreters of their own, on top of the others' of their files
    groups = [hinted_requests([t for t in searches if t.hinted])]
    groups += [collected_requests(ctx, task.victim) for task in searches if not task.hinted]
    if ctx.prober.expensive:
        passing = dict.fromkeys(plan.isolation, (Outcome.PASSED,))
        maybe = plan_searches(ctx, classify_results(ctx.results, passing, ctx.orders), found)
        groups.append(hinted_requests(hint_tasks(ctx, maybe)))
    return likely, added_up(*groups)


def _depends_on_others(
    ctx: Context, plan: Priorities, found: Mapping[str, TestEvidence]
) -> dict[str, Task]:
    """The searches of the likely failing suspects, were they to fail alone: those that
    passed in the suite depend on others. A hint of more tests than are started ahead
    gets neither its runs nor the collected ones (its search tries the hint first)."""
    failing = dict.fromkeys(plan.likely_failing, (Outcome.FAILED,))
    classified = classify_results(ctx.results, failing, ctx.orders)
    tasks = [
        t
        for t in plan_searches(ctx, classified, found)
        if t.victim in plan.likely_failing and t.category is Category.DEPENDS_ON_OTHERS
    ]
    hinted = hint_tasks(ctx, tasks)
    return {t.victim: t for t in hinted if hinted_runs(t) or not t.hinted}


def withdraw_likely(ctx: Context, likely: Mapping[str, Task], test_id: str) -> None:
    """A likely failing suspect passed its first alone-run: it depends on no other test,
    and what `likely_searches` started for its search is ended."""
    task = likely.get(test_id)
    if task is not None and task.hinted:
        withdraw_hinted(ctx.prober, task)
    elif task is not None:
        withdraw_collected(ctx, test_id)


def search_requests(
    ctx: Context,
    classified: Mapping[str, Classified],
    found: Mapping[str, TestEvidence],
    *,
    only: Collection[str],
) -> tuple[Prepared, list[Request]]:
    """The culprit searches of the victims (`only`) as classified after their alone-runs:
    the hinted ones' runs and a bisection's within its own file, to start ahead while the
    poisoned runs go on (else, as the search began, a right hint's first run would pay its
    start-up while the GPU idles). The runs asked for, by victim, for `withdraw_diagnosed`."""
    if not ctx.prober.hides_start_ups:
        return {}, []
    tasks = [t for t in plan_searches(ctx, classified, found) if t.victim in only]
    prepared: Prepared = {}
    for task in hint_tasks(ctx, tasks):
        if task.hinted:
            prepared[task.victim] = hinted_runs(task)
        elif task.category is Category.ORDER_DEPENDENT and _within_its_file(task):
            # every run of its bisection is of that file; one candidate: its run, confirmed
            prepared[task.victim] = [([task.victim], 2)]
    return prepared, requests_each(run for runs in prepared.values() for run in runs)


def _within_its_file(task: Task) -> bool:
    return bool(task.candidates) and all(
        file_of(c) == file_of(task.victim) for c in task.candidates
    )


def withdraw_diagnosed(ctx: Context, prepared: Prepared, found: Mapping[str, TestEvidence]) -> None:
    """The runs `search_requests` asked for a victim its poisoned runs diagnosed (it
    reads memory it never wrote, or went both ways): it has no search, they are ended."""
    for victim, runs in prepared.items():
        if diagnosed(found.get(victim)):
            withdraw_each(ctx.prober, runs)
