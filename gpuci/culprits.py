"""Culprits: which test broke which, found by replaying the failing interpreter in pieces.

- order-dependent: the tests that ran before the victim in the interpreter where it failed
  are halved, keeping a half after which the victim still fails, down to the smallest set
  (one test, in most real cases): about 2·log2(n) fresh interpreters, each running
  `[candidates..., victim]` in the original order, then one run that confirms the set.
- cascades: a culprit set found for one victim is tried first on every later victim that
  ran after it (one run each), so a sticky CUDA error or a leaked pool limit becomes one
  root with its victims instead of a bisection per victim.
- depends-on-others: the same halving over the tests before it where it passed, keeping
  a half after which it passes: its providers.
- concurrency: the victim alone, started together with each file that overlapped it in
  the parallel run (nearest in time first), both held at their first test until both got
  there, so that the victim's test runs while the partner's first does; the first pair
  that fails names the co-runner. If no pair fails, all of them at once.

Every run is evidence: counted against the budget, kept as a `Probe`, and a search the
budget cut says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from gpuci.classify import Classified
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
from gpuci.probe import Prober
from gpuci.reproduce import MAX_BESIDE, Order, gpu_of, ran_beside
from gpuci.results import ModeResults

PHASE = "culprits"
NOT_SEARCHED = "not searched (budget)"
NOT_REPRODUCED = "not reproduced"  # how a search that never saw the finding again begins
PAIRED = "pair: "  # how a search that found a co-running file begins
# the same run went both ways: identical conditions, both outcomes (a flaky victim)
SAME_RUN_BOTH_WAYS = "flaky: the same run went both ways"
SEARCHED = (Category.ORDER_DEPENDENT, Category.DEPENDS_ON_OTHERS, Category.CONCURRENCY)
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
        if task.category is Category.CONCURRENCY:
            search = _search_pairs(prober, results[Mode.PARALLEL], task)
        else:
            search = _cascade(prober, task, roots) or _bisect(prober, task)
            if task.pairs and search.note.startswith(NOT_REPRODUCED):
                search = _paired_instead(prober, results[Mode.PARALLEL], task, search)
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
            candidates=_co_runners(results, test.results[Mode.PARALLEL].file),
            rank=(2, place),
        )
    parallel = results.get(Mode.PARALLEL)
    pairs: tuple[str, ...] = ()
    if (  # it failed in the parallel screen too: maybe beside a file, not after one
        parallel is not None
        and parallel.run.beside
        and test.category is Category.ORDER_DEPENDENT
        and test.outcomes.get(Mode.PARALLEL) in NOT_PASSING
    ):
        pairs = _co_runners(results, test.results[Mode.PARALLEL].file)
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


def _co_runners(results: Mapping[Mode, ModeResults], file: str) -> tuple[str, ...]:
    """The files that ran beside `file`'s parallel interpreter, longest overlap first: the
    parallel files, then, where the screens ran at once, the threads files and the files
    the suite interpreter ran meanwhile (its tests' times laid end to end)."""
    parallel = results[Mode.PARALLEL]
    found = ran_beside(parallel, file, limit=None)
    mine = next((f for p in parallel.parts for f in p.files if f.file == file), None)
    if mine is None or not parallel.run.beside:
        return tuple(found[:MAX_BESIDE])
    overlaps: dict[str, float] = {}
    spans: list[tuple[str, float, float]] = []
    for mode in (Mode.THREADS, Mode.SUITE):
        for part in results[mode].parts if mode in results else ():
            if mode is Mode.THREADS:
                spans += [(f.file, f.start, f.end) for f in part.files]
            elif part.files and part.files[0].interpreters:
                first = part.files[0].interpreters[0]
                clock = first.start + (first.startup_s or 0.0)
                for test in part.tests:
                    spans.append((test.file, clock, clock + test.duration))
                    clock += test.duration
    for name, start, end in spans:
        overlap = min(end, mine.end) - max(start, mine.start)
        # not its own file: two copies of one file at once happen only in the screens (a
        # big test's copies run out of memory together), never in a run of one mode
        if overlap > 0 and name != file:
            overlaps[name] = overlaps.get(name, 0.0) + overlap
    more = sorted((f for f in overlaps if f not in found), key=lambda f: -overlaps[f])
    return tuple((found + more)[:MAX_BESIDE])


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


def _probe(prober: Prober, task: _Task, search: _Search, before: Sequence[str]) -> bool:
    """Run `[before..., victim]` in a fresh interpreter; whether the victim shows the finding."""
    ran = prober.run(
        [*before, task.victim],
        phase=PHASE,
        label=f"culprits of {task.victim}: after {len(before)} test(s)",
    )
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


def _shown(task: _Task) -> str:
    return "failed" if task.category is Category.ORDER_DEPENDENT else "passed"


def _confirmed_again(prober: Prober, task: _Task, search: _Search, current: list[str]) -> bool:
    """Once more, the same run that just showed the finding: a flaky victim comes out either
    way after anything, and would otherwise hand the search a culprit by chance. Where it
    does not show it again, the note says the same run went both ways (`SAME_RUN_BOTH_WAYS`)."""
    if not prober.exhausted() and _probe(prober, task, search, current):
        return True
    search.note = (
        f"search cut by budget before {len(current)} test(s) were confirmed twice"
        if prober.exhausted()
        else f"{NOT_REPRODUCED}: it {_shown(task)} after {len(current)} test(s), then not"
        f" ({SAME_RUN_BOTH_WAYS})"
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
        search.note = (
            f"not reproduced: it never {_shown(task)} after the tests before it ({runs} runs)"
        )
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
    """The victim alone beside each overlapping file, then beside all of them; a pair that
    shows the finding runs once more, and names its partner only if it shows it again (a
    flaky victim would otherwise name whoever ran beside it by chance)."""
    search = _Search([])
    apart = 0  # pair runs whose interpreters did not all start their tests together
    victim_file = task.victim.partition("::")[0]
    ids_of = _ids_by_file(parallel)
    groups: list[Sequence[str]] = [[c] for c in task.candidates]
    if len(task.candidates) > 1:
        groups.append(list(task.candidates))

    def pair_shows(beside: Sequence[str]) -> bool:
        nonlocal apart
        runs = [([task.victim], gpu_of(parallel, victim_file))]
        runs += [(ids_of.get(f, []), gpu_of(parallel, f)) for f in beside]
        started = [(ids, gpu) for ids, gpu in runs if ids]
        done, met = prober.run_together(
            started, phase=PHASE, label=f"culprits of {task.victim}: beside {len(beside)} file(s)"
        )
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
        if pair_shows(beside):
            search.culprits = tuple(beside)
            search.note = f"{PAIRED}{len(search.probes)} run(s), confirmed twice" + (
                f"; only all {len(beside)} together" if len(beside) > 1 else ""
            )
            return search
    search.note = (
        f"not reproduced: no pair showed it twice ({len(search.probes)} runs"
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
