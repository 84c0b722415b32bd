"""Culprits: which test broke which, found by replaying the failing interpreter in pieces.

- order-dependent: the tests before the victim where it failed are halved, keeping a half
  after which it still fails, down to the smallest set: about 2·log2(n) fresh interpreters
  running `[candidates..., victim]` in the original order.
- cascades: a culprit set found for one victim is tried first on every later victim (a
  sticky CUDA error, a leaked pool limit: one root with its victims).
- depends-on-others: the same halving, keeping a half after which it passes.
- concurrency: the victim started with each file that overlapped it (nearest first), both
  held at their first test until both got there; else with all of them at once.

Every answer is confirmed by a second identical run; where that run goes the other way,
the victim is flaky and nothing is named. Every run counts against the budget and is kept
as a `Probe`; a search the budget cut says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from gpuci.evidence.beside import beside_suite_test, co_runners
from gpuci.evidence.classify import Classified
from gpuci.evidence.probe import Prober
from gpuci.evidence.reproduce import Order, gpu_of
from gpuci.evidence.results import ModeResults
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

PHASE = "culprits"
NOT_SEARCHED = "not searched (budget)"
NOT_REPRODUCED = "not reproduced"  # how a search that never saw the finding again begins
PAIRED = "pair: "  # how a search that found a co-running file begins
SAME_RUN_BOTH_WAYS = "flaky: the same run went both ways"  # identical runs, both outcomes
SEARCHED = (Category.ORDER_DEPENDENT, Category.DEPENDS_ON_OTHERS, Category.CONCURRENCY)
SHOWN = {c: "passed" if c is Category.DEPENDS_ON_OTHERS else "failed" for c in Category}
MAX_CASCADE_TRIES = 3  # known culprit sets tried on a victim before it gets its own search


@dataclass(frozen=True, slots=True, kw_only=True)
class _Task:
    """One victim's search: the tests (or files) to search among, in the order they ran."""

    victim: str
    category: Category
    candidates: tuple[str, ...]
    rank: tuple[int, int]  # (kind, place in the suite's order): earlier victims first
    pairs: tuple[str, ...] = ()  # files to pair it with where a screen's replay shows nothing


@dataclass(slots=True)
class _Search:
    """One victim's runs so far."""

    probes: list[Probe]
    culprits: tuple[str, ...] = ()
    note: str = ""
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
    # victims in the order they ran in one interpreter, so that an early victim's culprit
    # is found first and tried on the later ones (a cascade)
    reference = results.get(Mode.SUITE) or next(iter(results.values()))
    place = {t.id: i for i, t in enumerate(reference.run.tests)}
    tasks = []
    for test in classified.values():
        # a victim that fails alone when poisoned reads uninitialized memory: its own bug;
        # one whose poisoned runs went both ways is flaky: nothing to search for either
        before = found.get(test.id)
        diagnosed = before is not None and (
            before.poisoned in NOT_PASSING or SAME_RUN_BOTH_WAYS in before.search
        )
        if test.category in SEARCHED and not diagnosed:
            task = _plan(test, results, orders, place.get(test.id, len(place)))
            if task is not None:
                tasks.append(task)
    if not tasks:
        return dict(found)
    _say(progress, f"culprits: searching for {len(tasks)} victim(s)")
    searches: dict[str, _Search] = {}
    roots: list[tuple[str, ...]] = []  # culprit sets found so far, in order
    for task in sorted(tasks, key=lambda t: t.rank):
        if prober.stopping():
            break
        if prober.exhausted():
            searches[task.victim] = _Search([], note=NOT_SEARCHED)
            _say(progress, f"  {task.victim}: culprits: {NOT_SEARCHED}")
            continue
        search = _search(prober, results, task, roots)
        if search.contradicted:  # the fork was not what a fresh interpreter is: redo it
            prober.forks_off(f"a fresh run of {task.victim} contradicted a forked one")
            _say(progress, f"  {task.victim}: {prober.notes[-1]}; its search runs again fresh")
            search = _search(prober, results, task, roots)
        searches[task.victim] = search
        if search.culprits and search.culprits not in roots:
            roots.append(search.culprits)
        shown = ", ".join(search.culprits) or "-"
        _say(progress, f"  {task.victim}: culprits: {shown} ({search.note})")
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
    task: _Task,
    roots: list[tuple[str, ...]],
) -> _Search:
    if task.category is Category.CONCURRENCY:
        return _search_pairs(prober, results[Mode.PARALLEL], task)
    return _replay(prober, results.get(Mode.PARALLEL), task, roots)


def _plan(
    test: Classified,
    results: Mapping[Mode, ModeResults],
    orders: Mapping[Mode, Order],
    place: int,
) -> _Task | None:
    """Where to search: the interpreter with the fewest tests before the victim."""
    if test.category is Category.CONCURRENCY:
        parallel = results.get(Mode.PARALLEL)
        if parallel is None:
            return None
        return _Task(
            victim=test.id,
            category=test.category,
            candidates=co_runners(results, test.results[Mode.PARALLEL].file),
            rank=(2, place),
        )
    parallel = results.get(Mode.PARALLEL)
    pairs: tuple[str, ...] = ()
    if parallel is not None and parallel.run.beside and test.category is Category.ORDER_DEPENDENT:
        # a screen's failure: maybe beside a file, not after one
        if test.outcomes.get(Mode.PARALLEL) in NOT_PASSING:
            pairs = co_runners(results, test.results[Mode.PARALLEL].file)
        elif test.outcomes.get(Mode.SUITE) in NOT_PASSING:
            pairs = beside_suite_test(results, test.id)
    wanted: set[Outcome] = (
        set(NOT_PASSING) if test.category is Category.ORDER_DEPENDENT else {Outcome.PASSED}
    )
    modes: tuple[Mode, ...] = (Mode.ISOLATED, Mode.SUITE)
    if test.category is Category.DEPENDS_ON_OTHERS:
        modes = (Mode.ISOLATED, Mode.PARALLEL, Mode.SUITE)
    best: _Task | None = None
    for mode in modes:
        if mode not in orders or test.outcomes.get(mode) not in wanted:
            continue
        where = orders[mode].where.get(test.id)
        if where is None or where[1] == 0:
            continue
        segment, position, _ = where
        before = [t.id for t in orders[mode].segments[segment][:position]]
        candidates = tuple(i for i in before if _selectable(i))
        if candidates and (best is None or len(candidates) < len(best.candidates)):
            rank = (0 if test.category is Category.ORDER_DEPENDENT else 1, place)
            best = _Task(
                victim=test.id,
                category=test.category,
                candidates=candidates,
                rank=rank,
                pairs=pairs,
            )
    return best


def _replay(
    prober: Prober, parallel: ModeResults | None, task: _Task, roots: list[tuple[str, ...]]
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
        return _paired_instead(prober, parallel, task, search)
    return search


def _paired_instead(prober: Prober, parallel: ModeResults, task: _Task, replay: _Search) -> _Search:
    """A screen's order-dependent suspect whose replay showed nothing, paired instead with
    what ran beside it in the parallel screen: a pair that fails makes it concurrency."""
    paired = _search_pairs(
        prober,
        parallel,
        dataclasses.replace(task, category=Category.CONCURRENCY, candidates=task.pairs),
    )
    if not paired.culprits:
        paired.note = f"{replay.note}; {paired.note}"
    paired.probes = replay.probes + paired.probes
    return paired


def _selectable(test_id: str) -> bool:
    """A real test pytest can select (not a stand-in for an interpreter's death)."""
    file, _, name = test_id.partition("::")
    return bool(file) and bool(name) and not name.startswith("[")


def _shows(task: _Task, outcome: Outcome) -> bool | None:
    """Whether the victim's outcome shows the finding; None where it did not run."""
    if outcome in (Outcome.NOT_RUN, Outcome.SKIPPED):
        return None
    if task.category is Category.DEPENDS_ON_OTHERS:
        return outcome is Outcome.PASSED
    return outcome in NOT_PASSING


def _probe(
    prober: Prober, task: _Task, search: _Search, before: Sequence[str], *, fresh: bool = False
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
        Probe(count=len(before), shown=tuple(before[-PROBE_SHOWN:]), outcome=outcome)
    )
    return bool(_shows(task, outcome))


def _cascade(prober: Prober, task: _Task, roots: Sequence[tuple[str, ...]]) -> _Search | None:
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
        if _probe(prober, task, search, ordered):
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


def _confirmed_again(prober: Prober, task: _Task, search: _Search, current: list[str]) -> bool:
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


def _bisect(prober: Prober, task: _Task, search: _Search | None = None) -> _Search:
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


def _search_pairs(prober: Prober, parallel: ModeResults, task: _Task) -> _Search:
    """The victim alone beside each overlapping file, then beside all of them; a pair
    names its partner only where it shows the finding twice in a row, and a pair that
    showed it once, then not, ends the search: flaky."""
    search = _Search([])
    apart = 0  # pair runs whose interpreters did not all start their tests together
    victim_file = task.victim.partition("::")[0]
    ids_of = _ids_by_file(parallel)
    groups: list[Sequence[str]] = [[c] for c in task.candidates]
    if len(task.candidates) > 1:
        groups.append(list(task.candidates))

    def pair_shows(beside: Sequence[str], *, fresh: bool = False) -> bool:
        nonlocal apart
        runs = [([task.victim], gpu_of(parallel, victim_file))]
        runs += [(ids_of.get(f, []), gpu_of(parallel, f)) for f in beside]
        started = [(ids, gpu) for ids, gpu in runs if ids]
        done, met = prober.run_together(
            started,
            phase=PHASE,
            label=f"culprits of {task.victim}: beside {len(beside)} file(s)",
            fresh=fresh,
        )
        search.forked = done[0].forked
        apart += met < len(started)  # one never reached its first test: no overlap
        outcome = done[0].outcome(task.victim)
        search.probes.append(
            Probe(count=len(beside), shown=tuple(beside[:PROBE_SHOWN]), outcome=outcome)
        )
        return _shows(task, outcome) is True

    for beside in groups:
        if prober.exhausted() or prober.stopping():
            search.note = NOT_SEARCHED if not search.probes else "search cut by budget"
            return search
        if not pair_shows(beside):
            continue
        if prober.exhausted() or prober.stopping():
            search.note = "search cut by budget before the pair was confirmed twice"
            return search
        forked = search.forked
        if not pair_shows(beside, fresh=True):  # confirmed fresh: the command it prints
            search.contradicted = forked
            # the same pair, started the same way, went both ways: flaky, like a replay
            shown = ", ".join(beside[:PROBE_SHOWN])
            search.note = (
                f"{NOT_REPRODUCED}: beside {shown} it {SHOWN[task.category]},"
                f" then not ({SAME_RUN_BOTH_WAYS})"
            )
            return search
        search.culprits = tuple(beside)
        search.note = f"{PAIRED}{len(search.probes)} run(s), confirmed twice" + (
            f"; only all {len(beside)} together" if len(beside) > 1 else ""
        )
        return search
    search.note = (
        f"{NOT_REPRODUCED}: no pair showed it twice ({len(search.probes)} runs"
        + (f"; {apart} did not overlap" if apart else "")
        + ")"
        if search.probes
        else "no file ran beside it"
    )
    return search


def _ids_by_file(parallel: ModeResults) -> dict[str, list[str]]:
    """Each file's tests as the parallel run ran them (what a co-runner replays)."""
    ids: dict[str, list[str]] = {}
    for test in parallel.run.tests:
        if test.outcome is not Outcome.NOT_RUN and _selectable(test.id):
            ids.setdefault(test.file, []).append(test.id)
    return ids


def _say(progress: TextIO, text: str) -> None:
    print(printable(f"gpuci: {text}"), file=progress, flush=True)
