"""Culprits (and providers) a victim's failure points at, tried before a bisection.

An order-dependent victim's failure (its message and the source line of its innermost frame)
is read against what the tests before it left behind (`gpuci.state.hints`); where that
points at none of them, and for a test that depends on others, the values its message quotes
are looked for in the source of the tests before it
(`gpuci.evidence.search.source_hints`); before those, for a test that depends
on others, the earlier files that brought a module its failure names or the suite's code
looks up in `sys.modules` (`gpuci.state.hints.module_providers`), collected where their
import brought it. Where either points at some of them, the search runs those before the
victim first. Where that run shows the failure, the bisection narrows those few (one test:
nothing to narrow) and confirms as always, so a right hint names the culprit in two runs;
where it does not, the search goes on as without a hint (an earlier victim's culprits, then
the bisection over every candidate, which stays the proof), that run kept first among its
probes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gpuci.evidence.context import Context
from gpuci.evidence.probe import Prober, withdraw_each
from gpuci.evidence.requests import Request, requests_each
from gpuci.evidence.results import ModeResults
from gpuci.evidence.search.bisect import bisect, cascade
from gpuci.evidence.search.source_hints import writers
from gpuci.evidence.search.step import Search, probe_after
from gpuci.evidence.search.waves import plan_wave
from gpuci.evidence.victims import Task
from gpuci.model import LATENT_ORDERS, NOT_PASSING, Category, Mode
from gpuci.run.proc.discover import file_of
from gpuci.state.hints import failure_text, hinted_candidates, module_providers
from gpuci.state.left import Ledger

LEDGER = "ledger"  # a probe that ran the tests the ledger pointed at
SOURCE = "source"  # a probe that ran the tests whose source writes what the failure quotes
MODULES = "modules"  # a probe that ran the files that brought a module the failure points at
# the failure read for a hint: the plain run's first, where the victim failed there
MODES_READ = (Mode.SUITE, Mode.ISOLATED, Mode.PARALLEL, Mode.THREADS, *LATENT_ORDERS)
MOST_PREPARED = 4  # hinted tests whose runs start ahead: more would take the slots' cores


def hint_tasks(ctx: Context, tasks: Sequence[Task]) -> list[Task]:
    """Each victim's task with the candidates its failure points at (in the state ledger,
    or in the suite's source), and what pointed."""
    return [_with_hint(task, ctx.results, ctx.ledger) for task in tasks]


def _with_hint(task: Task, results: Mapping[Mode, ModeResults], ledger: Ledger) -> Task:
    if task.category not in (Category.ORDER_DEPENDENT, Category.DEPENDS_ON_OTHERS):
        return task
    failed = _failure(task, results)
    if failed is None:
        return task
    message, where, rootdir = failed
    # the ledger speaks of what a test left behind: only a test that fails after one
    if task.category is Category.ORDER_DEPENDENT and (ledger.tests or ledger.files):
        text = failure_text(message, where, rootdir)
        hinted = hinted_candidates(ledger, task.candidates, text)
        if hinted:
            return dataclasses.replace(task, hinted=hinted, hint=LEDGER)
    if task.category is Category.DEPENDS_ON_OTHERS and (
        ledger.imported_modules or ledger.test_modules
    ):
        files = _earlier_files(task, results)
        text = failure_text(message, where, rootdir)
        hinted = module_providers(
            ledger, task.victim, files=files, candidates=task.candidates, text=text, rootdir=rootdir
        )
        if hinted:
            return dataclasses.replace(task, hinted=hinted, hint=MODULES)
    hinted = writers(task.candidates, message, rootdir)
    return dataclasses.replace(task, hinted=hinted, hint=SOURCE) if hinted else task


def _earlier_files(task: Task, results: Mapping[Mode, ModeResults]) -> list[str]:
    """The files a depends-on-others victim's providers may be in: those of the tests
    before it, then the suite's other files, which pytest imported before its first test
    wherever they stood (`gpuci.evidence.kinds.provider_search.collected`)."""
    files = dict.fromkeys(file_of(c) for c in task.candidates if "::" in c)
    suite = results.get(Mode.SUITE)
    if suite is not None:
        files.update(dict.fromkeys(t.file for t in suite.run.tests))
    files.pop(file_of(task.victim), None)
    return list(files)


def _failure(task: Task, results: Mapping[Mode, ModeResults]) -> tuple[str, str, Path] | None:
    """The victim's failure (message, innermost frame, rootdir): the plain run's first."""
    for mode in MODES_READ:
        mode_results = results.get(mode)
        if mode_results is None:
            continue
        for test in mode_results.run.tests:
            if test.id == task.victim and test.outcome in NOT_PASSING:
                return test.message, test.where, Path(mode_results.run.rootdir)
    return None


def hinted_first(
    prober: Prober,
    task: Task,
    roots: Sequence[tuple[str, ...]] = (),
    rest: Callable[[], Search] | None = None,
) -> Search | None:
    """The hinted candidates before the victim first: where it shows its finding so (fails,
    or passes where it depends on others), narrowed and confirmed among them; else `rest`,
    or the earlier victims' culprits (`roots`, a cascade), then the whole bisection. None
    where there is no hint."""
    hinted = list(task.hinted)
    if not hinted:
        return None
    search = Search([])
    whose = {LEDGER: "the ledger's", MODULES: "the modules'"}.get(task.hint, "the source's")
    if prober.hides_start_ups:  # a right hint's runs, started while the hint's goes on
        prepare_hinted(prober, [task])
    if not probe_after(prober, task, search, hinted, task.hint):
        found = rest() if rest is not None else cascade(prober, task, roots)
        if found is None:
            found = bisect(prober, task, search)
        else:
            found.probes[:0] = search.probes
        found.note = f"{found.note} ({whose} hint did not show it)"
        return found
    among = dataclasses.replace(task, candidates=tuple(hinted))
    narrowed = bisect(prober, among, search, shown=True)
    if narrowed.culprits:
        narrowed.note = f"{task.hint}: {len(narrowed.probes)} run(s), {whose} hint confirmed"
    return narrowed


def hinted_requests(tasks: Sequence[Task]) -> list[Request]:
    """Each hinted search's likely runs, to start ahead (where start-ups are expensive,
    before the alone-runs; else as the search begins), so that a right hint costs its
    tests' time, not their start-ups: the hint's run, where it hints at several tests each
    one's before the victim (the narrowing's), and the culprit's again (the confirmation).
    A run takes any interpreter of its files; those not taken are killed at the end."""
    return requests_each(run for task in tasks for run in hinted_runs(task))


def prepare_hinted(prober: Prober, tasks: Sequence[Task]) -> None:
    """`hinted_requests` started ahead as a search begins."""
    prober.start_ahead(hinted_requests(tasks))


def withdraw_hinted(prober: Prober, task: Task) -> None:
    """`prepare_hinted`'s interpreters for `task` ended: its search will not come (the
    victim passed alone: not a depends-on-others test after all)."""
    withdraw_each(prober, hinted_runs(task))


def hinted_runs(task: Task) -> list[tuple[list[str], int]]:
    """The runs of `task`'s hinted search started ahead, one per set of files (one
    interpreter serves any run of its files), and how many of each; none where it hints
    at more than MOST_PREPARED tests: the hint's run, the narrowing's runs among the hinted
    tests (every node of its halving, as one wave of `gpuci.evidence.waves` runs them at
    once), and each hinted test's again (the culprit's confirmation)."""
    if not task.hinted or len(task.hinted) > MOST_PREPARED:
        return []
    hinted = list(task.hinted)
    likely = [[*hinted, task.victim]]
    for node in plan_wave(len(hinted), width=2 * MOST_PREPARED):
        lo, hi = node.runs
        likely.append([*hinted[lo:hi], task.victim])
    likely += [[h, task.victim] for h in hinted]
    by_files: dict[frozenset[str], list[list[str]]] = {}
    for ids in likely:
        by_files.setdefault(frozenset(file_of(i) for i in ids), []).append(ids)
    return [(same[0], len(same)) for same in by_files.values()]
