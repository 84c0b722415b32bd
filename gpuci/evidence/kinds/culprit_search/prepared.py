"""A culprit search's runs started ahead: the runs its searches will likely make, declared
to the runner (`gpuci.evidence.requests.Request`) before the search begins, where start-ups
are worth hiding (`Prober.hides_start_ups`).

- Before the alone-runs, where start-ups are expensive (`likely_searches`): every isolation
  suspect's hinted runs (`gpuci.evidence.search.hinted`), were it order-dependent.
- After them (`search_requests`): the order-dependent victims' hinted runs and a bisection's
  within its own file; ended for a victim its poisoned runs diagnosed
  (`gpuci.evidence.victims.withdraw_diagnosed`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from gpuci.evidence.alone import Priorities
from gpuci.evidence.classify import Classified, classify_results
from gpuci.evidence.context import Context
from gpuci.evidence.requests import Request, requests_each
from gpuci.evidence.search.hinted import hint_tasks, hinted_requests, hinted_runs
from gpuci.evidence.victims import Prepared, Task, plan_searches
from gpuci.model import Category, Outcome, TestEvidence
from gpuci.run.proc.discover import file_of


def likely_searches(
    ctx: Context, plan: Priorities, found: Mapping[str, TestEvidence]
) -> list[Request]:
    """Where start-ups are expensive, every isolation suspect's hinted runs, were it
    order-dependent (were it to pass alone)."""
    if not ctx.prober.hides_start_ups or not ctx.prober.expensive:
        return []
    passing = dict.fromkeys(plan.isolation, (Outcome.PASSED,))
    maybe = plan_searches(ctx, classify_results(ctx.results, passing, ctx.orders), found)
    return hinted_requests(hint_tasks(ctx, maybe))


def search_requests(
    ctx: Context,
    classified: Mapping[str, Classified],
    found: Mapping[str, TestEvidence],
    *,
    only: Collection[str],
) -> tuple[Prepared, list[Request]]:
    """The culprit searches of the order-dependent victims (`only`) as classified after
    their alone-runs: the hinted ones' runs and a bisection's within its own file, to start
    ahead while the poisoned runs go on (else, as the search began, a right hint's first
    run would pay its start-up while the GPU idles). The runs asked for, by victim, for
    `withdraw_diagnosed`."""
    if not ctx.prober.hides_start_ups:
        return {}, []
    tasks = plan_searches(ctx, classified, found, category=Category.ORDER_DEPENDENT, only=only)
    prepared: Prepared = {}
    for task in hint_tasks(ctx, tasks):
        if task.hinted:
            prepared[task.victim] = hinted_runs(task)
        elif _within_its_file(task):
            # every run of its bisection is of that file; one candidate: its run, confirmed
            prepared[task.victim] = [([task.victim], 2)]
    return prepared, requests_each(run for runs in prepared.values() for run in runs)


def _within_its_file(task: Task) -> bool:
    return bool(task.candidates) and all(
        file_of(c) == file_of(task.victim) for c in task.candidates
    )
