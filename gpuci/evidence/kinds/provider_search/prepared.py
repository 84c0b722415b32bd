"""A provider search's runs started ahead: the runs its searches will likely make, declared
to the runner (`gpuci.evidence.requests.Request`) before the search begins, where start-ups
are worth hiding (`Prober.hides_start_ups`); those a search will not need, ended.

- Before the alone-runs (`likely_searches`): a likely failing suspect that passed in the
  suite, were it to fail alone, depends on others: its hint's runs
  (`gpuci.evidence.search.hinted`) where its failure points at a few earlier tests, else its
  run with the suite's other files collected and the halving's first wave
  (`gpuci.evidence.kinds.provider_search.collected`). Ended where it passes alone
  (`withdraw_likely`).
- After them (`search_requests`): the depends-on-others victims' hinted runs; ended for a
  victim its poisoned runs diagnosed (`gpuci.evidence.victims.withdraw_diagnosed`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from gpuci.evidence.alone import Priorities
from gpuci.evidence.classify import Classified, classify_results
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.provider_search.collected import collected_requests, withdraw_collected
from gpuci.evidence.requests import Request, added_up, requests_each
from gpuci.evidence.search.hinted import (
    hint_tasks,
    hinted_requests,
    hinted_runs,
    withdraw_hinted,
)
from gpuci.evidence.victims import Prepared, Task, plan_searches
from gpuci.model import Category, Outcome, TestEvidence


def likely_searches(
    ctx: Context, plan: Priorities, found: Mapping[str, TestEvidence]
) -> tuple[dict[str, Task], list[Request]]:
    """The searches of the likely failing suspects (`plan.likely_failing`), were they to
    fail alone, by victim, and their first runs."""
    if not ctx.prober.hides_start_ups:
        return {}, []
    likely = _depends_on_others(ctx, plan, found)
    searches = likely.values()  # where it passed in the suite
    # each search's runs need interpreters of their own, on top of the others' of their files
    groups = [hinted_requests([t for t in searches if t.hinted])]
    groups += [collected_requests(ctx, task.victim) for task in searches if not task.hinted]
    return likely, added_up(*groups)


def _depends_on_others(
    ctx: Context, plan: Priorities, found: Mapping[str, TestEvidence]
) -> dict[str, Task]:
    """The searches of the likely failing suspects, were they to fail alone: those that
    passed in the suite depend on others. A hint of more tests than are started ahead
    gets neither its runs nor the collected ones (its search tries the hint first)."""
    failing = dict.fromkeys(plan.likely_failing, (Outcome.FAILED,))
    classified = classify_results(ctx.results, failing, ctx.orders)
    depending = Category.DEPENDS_ON_OTHERS
    tasks = plan_searches(ctx, classified, found, category=depending, only=plan.likely_failing)
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
    """The provider searches of the depends-on-others victims (`only`) as classified after
    their alone-runs: the hinted ones' runs, to start ahead while the poisoned runs go on.
    The runs asked for, by victim, for `withdraw_diagnosed`."""
    if not ctx.prober.hides_start_ups:
        return {}, []
    depending = Category.DEPENDS_ON_OTHERS
    tasks = plan_searches(ctx, classified, found, category=depending, only=only)
    prepared: Prepared = {t.victim: hinted_runs(t) for t in hint_tasks(ctx, tasks) if t.hinted}
    return prepared, requests_each(run for runs in prepared.values() for run in runs)
