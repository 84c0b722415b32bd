"""Culprits the state ledger points at, tried before a bisection.

A victim's failure (its message and the source line of its innermost frame) is read
against what the tests before it left behind (`gpuci.state.hints`): where it points at
some of them, the search runs those before the victim first. Where that run shows the
failure, the bisection narrows those few (one test: nothing to narrow) and confirms as
always, so a right hint names the culprit in two runs; where it does not, the search goes
on as without a hint (an earlier victim's culprits, then the bisection over every
candidate, which stays the proof), that run kept first among its probes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuci.evidence.bisect import bisect, cascade
from gpuci.evidence.probe import Prober
from gpuci.evidence.results import ModeResults
from gpuci.evidence.search import Search, probe_after
from gpuci.evidence.victims import Task
from gpuci.model import NOT_PASSING, Category, Mode
from gpuci.state.hints import failure_text, hinted_candidates
from gpuci.state.left import Ledger

LEDGER = "ledger"  # a probe that ran the tests the ledger pointed at
# the failure read against the ledger: the plain run's first, where the victim failed
MODES_READ = (Mode.SUITE, Mode.ISOLATED, Mode.PARALLEL, Mode.THREADS)


def hint_tasks(
    tasks: Sequence[Task], results: Mapping[Mode, ModeResults], ledger: Ledger
) -> list[Task]:
    """Each order-dependent victim's task with the candidates its failure points at."""
    if not ledger.tests and not ledger.files:
        return list(tasks)
    return [
        dataclasses.replace(task, hinted=_hinted(task, results, ledger))
        if task.category is Category.ORDER_DEPENDENT
        else task
        for task in tasks
    ]


def _hinted(task: Task, results: Mapping[Mode, ModeResults], ledger: Ledger) -> tuple[str, ...]:
    for mode in MODES_READ:
        mode_results = results.get(mode)
        if mode_results is None:
            continue
        failed = [t for t in mode_results.run.tests if t.id == task.victim]
        for test in failed:
            if test.outcome in NOT_PASSING:
                rootdir = Path(mode_results.run.rootdir)
                text = failure_text(test.message, test.where, rootdir)
                return hinted_candidates(ledger, task.candidates, text)
    return ()


def ledger_first(
    prober: Prober, task: Task, roots: Sequence[tuple[str, ...]] = ()
) -> Search | None:
    """The hinted candidates before the victim first: where it fails so, narrowed and
    confirmed among them; else the earlier victims' culprits (`roots`, a cascade), then the
    whole bisection. None where there is no hint."""
    hinted = list(task.hinted)
    if not hinted or task.category is not Category.ORDER_DEPENDENT:
        return None
    search = Search([])
    if not probe_after(prober, task, search, hinted, LEDGER):
        found = cascade(prober, task, roots)
        if found is None:
            found = bisect(prober, task, search)
        else:
            found.probes[:0] = search.probes
        found.note = f"{found.note} (the ledger's hint did not show it)"
        return found
    among = dataclasses.replace(task, candidates=tuple(hinted))
    narrowed = bisect(prober, among, search, shown=True)
    if narrowed.culprits:
        narrowed.note = f"ledger: {len(narrowed.probes)} run(s), the ledger's hint confirmed"
    return narrowed
