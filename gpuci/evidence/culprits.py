"""Culprits: which test broke which, found by replaying the failing interpreter in pieces.

- order-dependent: the tests before the victim where it failed are halved, keeping a half
  after which it still fails, down to the smallest set: about 2·log2(n) fresh interpreters
  running `[candidates..., victim]` in the original order.
- cascades: a culprit set found for one victim is tried first on every later victim (a
  sticky CUDA error, a leaked pool limit: one root with its victims).
- depends-on-others: the same halving, keeping a half after which it passes.
- concurrency: the victim started with each file that overlapped it (`gpuci.evidence.pairs`);
  a test of that file that failed the victim's way beside it is its partner, and names it.

Every answer is confirmed by a second identical run; where that run goes the other way,
the victim is flaky and nothing is named. Every run counts against the budget and is kept
as a `Probe`; a search the budget cut says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from gpuci.evidence.classify import Classified
from gpuci.evidence.pairs import (
    NOT_REPRODUCED,
    NOT_SEARCHED,
    PHASE,
    SAME_RUN_BOTH_WAYS,
    partner_note,
    search_pairs,
)
from gpuci.evidence.probe import Prober
from gpuci.evidence.reproduce import Order
from gpuci.evidence.results import ModeResults
from gpuci.evidence.victims import Task, plan_searches
from gpuci.model import (
    NOT_PASSING,
    PROBE_SHOWN,
    Category,
    Mode,
    Outcome,
    Probe,
    TestEvidence,
    printable,
)

SHOWN = {c: "passed" if c is Category.DEPENDS_ON_OTHERS else "failed" for c in Category}
# a pair's partner must not fail on its own: these pass with nothing beside them
PARTNERABLE = frozenset({Category.PASSED, Category.ORDER_DEPENDENT, Category.CONCURRENCY})
CASCADE = "cascade"  # a probe that tried an earlier victim's culprits
MAX_CASCADE_TRIES = 3  # known culprit sets tried on a victim before it gets its own search


@dataclass(slots=True)
class _Search:
    """One victim's runs so far."""

    probes: list[Probe]
    culprits: tuple[str, ...] = ()
    note: str = ""
    partners: tuple[str, ...] = ()  # a pair's: its partner file's tests that failed its way
    forked: bool = False  # the last run was forked from the pre-imported parent
    contradicted: bool = False  # a fresh run did not confirm what a forked one showed


def search_culprits(
    prober: Prober,
    results: Mapping[Mode, ModeResults],
    classified: Mapping[str, Classified],
    found: Mapping[str, TestEvidence],
    *,
    orders: Mapping[Mode, Order],
    progress: TextIO,
) -> dict[str, TestEvidence]:
    """The culprits of every isolation regression, added to the evidence by test id."""
    tasks = plan_searches(results, classified, found, orders)
    if not tasks:
        return dict(found)
    _say(progress, f"culprits: searching for {len(tasks)} victim(s)")
    searches: dict[str, _Search] = {}
    roots: list[tuple[str, ...]] = []  # culprit sets found so far, in order
    partnerable = frozenset(t.id for t in classified.values() if t.category in PARTNERABLE)
    for task in sorted(tasks, key=lambda t: t.rank):
        if prober.stopping():
            break
        if task.victim in searches:  # an earlier victim's pair runs showed it as a partner
            continue
        if prober.exhausted():
            searches[task.victim] = _Search([], note=NOT_SEARCHED)
            _say(progress, f"  {task.victim}: culprits: {NOT_SEARCHED}")
            continue
        search = _search(prober, results, task, roots, partnerable)
        if search.contradicted:  # the fork was not what a fresh interpreter is: redo it
            prober.forks_off(f"a fresh run of {task.victim} contradicted a forked one")
            _say(progress, f"  {task.victim}: {prober.notes[-1]}; its search runs again fresh")
            search = _search(prober, results, task, roots, partnerable)
        searches[task.victim] = search
        if search.culprits and search.culprits not in roots:
            roots.append(search.culprits)
        shown = ", ".join(search.culprits) or "-"
        _say(progress, f"  {task.victim}: culprits: {shown} ({search.note})")
        for partner in search.partners:
            # contention is symmetric: it fails beside the victim, in the victim's command
            if partner not in searches:
                note = partner_note(task.victim, len(search.probes))
                searches[partner] = _Search([], culprits=(task.victim,), note=note)
                _say(progress, f"  {partner}: culprits: {task.victim} ({note})")
    merged = dict(found)
    for victim, search in searches.items():
        before = merged.get(victim, TestEvidence(id=victim))
        merged[victim] = dataclasses.replace(
            before, culprits=search.culprits, search=search.note, probes=tuple(search.probes)
        )
    return merged


def _search(
    prober: Prober,
    results: Mapping[Mode, ModeResults],
    task: Task,
    roots: list[tuple[str, ...]],
    partnerable: frozenset[str],
) -> _Search:
    if task.category is Category.CONCURRENCY:
        return _pairs(prober, results[Mode.PARALLEL], task, partnerable)
    return _replay(prober, results.get(Mode.PARALLEL), task, roots, partnerable)


def _replay(
    prober: Prober,
    parallel: ModeResults | None,
    task: Task,
    roots: list[tuple[str, ...]],
    partnerable: frozenset[str],
) -> _Search:
    """An interpreter's victim: known culprits first, then halving; where the replay never
    showed it, the files that ran beside it in the parallel screen."""
    search = _cascade(prober, task, roots) or _bisect(prober, task)
    # a replay that went both ways made it flaky: no pair can say otherwise
    if (
        parallel is not None
        and task.pairs
        and search.note.startswith(NOT_REPRODUCED)
        and SAME_RUN_BOTH_WAYS not in search.note
    ):
        return _paired_instead(prober, parallel, task, search, partnerable)
    return search


def _paired_instead(
    prober: Prober,
    parallel: ModeResults,
    task: Task,
    replay: _Search,
    partnerable: frozenset[str],
) -> _Search:
    """A screen's order-dependent suspect whose replay showed nothing, paired instead with
    what ran beside it in the parallel screen: a pair that fails makes it concurrency."""
    paired = _pairs(prober, parallel, dataclasses.replace(task, candidates=task.pairs), partnerable)
    if not paired.culprits:
        paired.note = f"{replay.note}; {paired.note}"
    paired.probes = replay.probes + paired.probes
    return paired


def _pairs(
    prober: Prober, parallel: ModeResults, task: Task, partnerable: frozenset[str]
) -> _Search:
    """The victim beside the files that ran with it (`gpuci.evidence.pairs`)."""
    found = search_pairs(
        prober,
        parallel,
        victim=task.victim,
        candidates=task.candidates,
        kind=task.kind,
        partnerable=partnerable - {task.victim},
    )
    return _Search(
        found.probes,
        culprits=found.culprits,
        note=found.note,
        partners=found.partners,
        contradicted=found.contradicted,
    )


def _shows(task: Task, outcome: Outcome) -> bool | None:
    """Whether the victim's outcome shows the finding; None where it did not run."""
    if outcome in (Outcome.NOT_RUN, Outcome.SKIPPED):
        return None
    if task.category is Category.DEPENDS_ON_OTHERS:
        return outcome is Outcome.PASSED
    return outcome in NOT_PASSING


def _probe(
    prober: Prober,
    task: Task,
    search: _Search,
    before: Sequence[str],
    kind: str = "",
    *,
    fresh: bool = False,
) -> bool:
    """Run `[before..., victim]` (forked, unless `fresh`: a confirmation); whether the victim
    shows the finding."""
    ran = prober.run(
        [*before, task.victim],
        phase=PHASE,
        label=f"culprits of {task.victim}: after {len(before)} test(s)",
        fresh=fresh,
    )
    search.forked = ran.forked
    outcome = ran.outcome(task.victim)
    search.probes.append(
        Probe(count=len(before), shown=tuple(before[-PROBE_SHOWN:]), outcome=outcome, kind=kind)
    )
    return bool(_shows(task, outcome))


def _cascade(prober: Prober, task: Task, roots: Sequence[tuple[str, ...]]) -> _Search | None:
    """A culprit set found for an earlier victim, confirmed on this one in two runs."""
    if task.category is not Category.ORDER_DEPENDENT:
        return None
    candidates = set(task.candidates)
    tried = 0
    search = _Search([])
    for culprits in roots:
        if tried == MAX_CASCADE_TRIES or prober.exhausted():
            break
        if not set(culprits) <= candidates:
            continue
        tried += 1
        ordered = [c for c in task.candidates if c in set(culprits)]
        if _probe(prober, task, search, ordered, CASCADE):
            if _confirmed_again(prober, task, search, ordered):
                search.culprits = tuple(ordered)
                search.note = (
                    "cascade: the culprit of an earlier victim, confirmed twice in"
                    f" {len(search.probes)} run(s)"
                )
            return search
    if not search.probes:
        return None
    return _bisect(prober, task, search)


def _confirmed_again(prober: Prober, task: Task, search: _Search, current: list[str]) -> bool:
    """The run that just showed the finding, once more and fresh (the command the report
    prints): a flaky victim would otherwise hand the search a culprit by chance (then the
    note says `SAME_RUN_BOTH_WAYS`); where the first was forked, the fork is suspect."""
    forked = search.forked
    if not prober.exhausted() and _probe(prober, task, search, current, fresh=True):
        return True
    search.contradicted = forked and not prober.exhausted()
    search.note = (
        f"search cut by budget before {len(current)} test(s) were confirmed twice"
        if prober.exhausted()
        else f"{NOT_REPRODUCED}: it {SHOWN[task.category]} after {len(current)} test(s),"
        f" then not ({SAME_RUN_BOTH_WAYS})"
    )
    return False


def _bisect(prober: Prober, task: Task, search: _Search | None = None) -> _Search:
    """Halve the candidates, keeping a half that still shows the finding; then confirm."""
    search = search or _Search([])
    current = list(task.candidates)
    confirmed = False  # whether the last probe ran exactly `current` and showed it
    several = False
    while len(current) > 1:
        if prober.exhausted() or prober.stopping():
            # a narrowed set is not a culprit until a run confirms it: none is named
            search.note = (
                f"search cut by budget after {len(search.probes)} run(s),"
                f" down to {len(current)} of {len(task.candidates)} tests"
            )
            return search
        half = len(current) // 2
        for part in (current[:half], current[half:]):
            if _probe(prober, task, search, part):
                current, confirmed = part, True
                break
        else:
            several = True  # neither half alone: the finding needs tests from both
            break
    if not confirmed:
        if prober.exhausted():
            search.note = NOT_SEARCHED if not search.probes else "search cut by budget"
            return search
        confirmed = _probe(prober, task, search, current)
    if not confirmed:
        runs = len(search.probes)
        what = SHOWN[task.category]
        search.note = f"{NOT_REPRODUCED}: it never {what} after the tests before it ({runs} runs)"
        return search
    if not _confirmed_again(prober, task, search, current):
        return search
    runs = len(search.probes)
    search.culprits = tuple(current)
    search.note = f"bisection: {runs} run(s)" + (
        f"; needs all {len(current)} together" if several else ""
    )
    return search


def _say(progress: TextIO, text: str) -> None:
    print(printable(f"gpuci: {text}"), file=progress, flush=True)
