"""Likely runs: the evidence runs known before the alone-runs begin, as requests the kinds
declare to the runner (`gpuci.evidence.ahead.Request`), which starts them ahead where a
start-up is worth hiding (`Prober.hides_start_ups`).

Strict runs go one after another, and each fresh interpreter pays its start-up while the
GPU idles (CuPy's start-up can be many times a short test's run). So these start at once, held
after their collection (`gpuci.evidence.ahead`), in the order they will run:
- each isolation suspect's first alone-run, and where it failed in every interpreter of
  its own file its second (the first will likely fail, and the test wants two);
- each test that failed the same way everywhere, and each group's representative;
- a likely failing suspect that passed in the suite: the first runs of its
  depends-on-others search, its hint's (`gpuci.evidence.hinted`) where its failure points
  at a few earlier tests, else its run with the suite's other files collected and the
  halving's first wave (`gpuci.evidence.collected`);
- where start-ups are expensive (PyTorch's), every suspect's runs it may need:
  its second alone-run, its poisoned run, its hinted culprits' runs.
Once a suspect passed its first alone-run, what was started for it as a likely failure is
ended (`withdraw_unlikely`: held, they would take the places of the confirmations after
them, which would start cold), and an order-dependent victim's poisoned
run is requested (`poisoned_requests`).

An interpreter serves any run of its files, so a file gets as many as its runs in a row
(one per run, counted over its tests). Those not taken are killed at the end; a guess
costs idle cores, never a result.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from gpuci.evidence.ahead import Request, added_up, requests_each
from gpuci.evidence.alone import Priorities, poisoned_after
from gpuci.evidence.classify import Classified, classify_results
from gpuci.evidence.collected import collected_requests, withdraw_collected
from gpuci.evidence.context import Context
from gpuci.evidence.hinted import hint_tasks, hinted_requests, hinted_runs, withdraw_hinted
from gpuci.evidence.pairs import first_pair_requests, pair_order
from gpuci.evidence.poisoned import poisonable, worth_poisoning
from gpuci.evidence.probe import Prober, withdraw_each
from gpuci.evidence.results import ModeResults
from gpuci.evidence.victims import Task, diagnosed, plan_searches
from gpuci.model import Category, Mode, Outcome, TestEvidence
from gpuci.run.proc.discover import POISON_ENV, file_of

POISONED = ((POISON_ENV, "1"),)  # a poisoned run's environment (`gpuci.evidence.poison`)


@dataclass(frozen=True, slots=True)
class Likely:
    """What `likely_requests` asked to start for the likely failing suspects: by victim, its
    depends-on-others search (its hint's runs, else those with the files collected)."""

    results: Mapping[Mode, ModeResults]
    searches: Mapping[str, Task] = field(default_factory=dict)


def likely_requests(
    ctx: Context, plan: Priorities, wanted: Mapping[str, int], found: Mapping[str, TestEvidence]
) -> tuple[Likely, list[Request]]:
    """The runs `plan` will make first (one per test where start-ups are cheap but worth
    hiding, more where they are expensive), in the order they will run."""
    prober, results = ctx.prober, ctx.results
    if not prober.hides_start_ups:
        return Likely(results), []
    in_a_row: dict[str, int] = {}  # by file: the interpreters its runs so far need
    requests: list[Request] = []

    def offer(test_id: str, runs: int) -> None:
        file = file_of(test_id)
        in_a_row[file] = in_a_row.get(file, 0) + runs
        requests.append(Request(ids=(test_id,), strict=True, copies=in_a_row[file]))

    for test_id, n in plan.isolation.items():
        twice = test_id in plan.likely_failing or prober.expensive
        offer(test_id, min(2, n) if twice else min(1, n))
    for test_id in plan.consistent:
        offer(test_id, 1)
    for group in plan.groups:
        offer(group.representatives[0], 1)
        for member in poisoned_after(group, group.representatives[0]):  # likely split
            offer(member, 1)
    likely = Likely(results, _depends_on_others(ctx, plan, found))
    searches = likely.searches.values()  # where it passed in the suite
    # each group's runs need their own interpreters, on top of the alone-runs' of their files
    groups = [requests, hinted_requests([t for t in searches if t.hinted])]
    groups += [
        collected_requests(prober, results, task.victim) for task in searches if not task.hinted
    ]
    if not prober.expensive:
        return likely, added_up(*groups)
    if not prober.poisoned:  # its poisoned run, where it turns out order-dependent
        groups.append([Request(ids=(i,), strict=True, env=POISONED) for i in plan.isolation])
    # its culprit search's hinted runs, where it turns out order-dependent
    passing = dict.fromkeys(plan.isolation, (Outcome.PASSED,))
    classified = classify_results(results, passing, ctx.orders)
    maybe = plan_searches(results, classified, found, ctx.orders)
    groups.append(hinted_requests(hint_tasks(maybe, results, ctx.ledger)))
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
        for t in plan_searches(ctx.results, classified, found, ctx.orders)
        if t.victim in plan.likely_failing and t.category is Category.DEPENDS_ON_OTHERS
    ]
    hinted = hint_tasks(tasks, ctx.results, ctx.ledger)
    return {t.victim: t for t in hinted if hinted_runs(t) or not t.hinted}


def withdraw_unlikely(prober: Prober, likely: Likely, test_id: str) -> None:
    """A likely failing suspect passed its first alone-run: its second alone-run comes at
    the end, if at all, and it depends on no other test; what was started for those, ended.
    The search's first: ending the copy frees a place, which the next offer queued takes."""
    task = likely.searches.get(test_id)
    if task is not None and task.hinted:
        withdraw_hinted(prober, task)
    elif task is not None:
        withdraw_collected(prober, likely.results, test_id)
    prober.withdraw([test_id], strict=True)


def poisoned_requests(
    ctx: Context, found: Mapping[str, TestEvidence], *, only: Collection[str]
) -> list[Request]:
    """The poisoned runs of the suspects (`only`) that passed their first alone-run and are
    order-dependent victims, to start ahead while the other alone-runs go on (the poisoned
    runs start at once after them, beside each other, and would otherwise start cold).
    Again after each stage: one started already counts."""
    if not ctx.prober.hides_start_ups or ctx.prober.poisoned:
        return []
    alone = {i: t.alone for i, t in found.items() if t.alone}
    classified = classify_results(ctx.results, alone, ctx.orders)
    victims = [
        t.id
        for t in classified.values()
        if t.category is Category.ORDER_DEPENDENT and t.id in only and Outcome.PASSED in t.reruns
    ]
    return _poisoned(ctx.prober, ctx.results, victims)


def cascade_requests(
    prober: Prober, results: Mapping[Mode, ModeResults], split: list[str]
) -> list[Request]:
    """A sticky error's later victims in its file (a group split) run alone now, and
    likely pass (the cascade's): their poisoned runs, to start with them."""
    if prober.hides_start_ups and not prober.poisoned:
        return _poisoned(prober, results, split)
    return []


def _poisoned(prober: Prober, results: Mapping[Mode, ModeResults], ids: list[str]) -> list[Request]:
    worth = worth_poisoning(results, ids)
    if not worth or not poisonable(prober):
        return []
    return [Request(ids=(test_id,), env=POISONED) for test_id in worth]


Prepared = dict[str, list[tuple[list[str], int]]]  # by victim: the runs started, and copies


def search_requests(
    ctx: Context,
    classified: Mapping[str, Classified],
    found: Mapping[str, TestEvidence],
    *,
    only: Collection[str],
) -> tuple[Prepared, list[Request]]:
    """The culprit searches of the victims (`only`) as classified after their alone-runs:
    the hinted ones' runs, a bisection's within its own file, and each contention's first
    pair, to start ahead while the poisoned runs go on (else, as the search began, a right
    hint's first run would pay its start-up while the GPU idles). The runs asked for, by
    victim, for `withdraw_diagnosed`."""
    prober, results = ctx.prober, ctx.results
    if not prober.hides_start_ups:
        return {}, []
    tasks = [t for t in plan_searches(results, classified, found, ctx.orders) if t.victim in only]
    parallel = results.get(Mode.PARALLEL)
    requests: list[Request] = []
    if parallel is not None:  # each contention's first pair: the likeliest contender
        peaks = prober.admission.peaks
        pairs = [
            (t.victim, pair_order(t.candidates, t.kind, peaks), t.kind)
            for t in tasks
            if t.category is Category.CONCURRENCY
        ]
        requests += first_pair_requests(parallel, pairs)
    prepared: Prepared = {}
    for task in hint_tasks(tasks, results, ctx.ledger):
        if task.hinted:
            prepared[task.victim] = hinted_runs(task)
        elif task.category is Category.ORDER_DEPENDENT and _within_its_file(task):
            # every run of its bisection is of that file; one candidate: its run, confirmed
            prepared[task.victim] = [([task.victim], 2)]
    return prepared, requests + requests_each(run for runs in prepared.values() for run in runs)


def _within_its_file(task: Task) -> bool:
    return bool(task.candidates) and all(
        file_of(c) == file_of(task.victim) for c in task.candidates
    )


def withdraw_diagnosed(
    prober: Prober, prepared: Prepared, found: Mapping[str, TestEvidence]
) -> None:
    """The runs `search_requests` asked for a victim its poisoned runs diagnosed (it
    reads memory it never wrote, or went both ways): it has no search, they are ended."""
    for victim, runs in prepared.items():
        if diagnosed(found.get(victim)):
            withdraw_each(prober, runs)
