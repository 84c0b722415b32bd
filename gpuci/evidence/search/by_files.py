"""A search by files, then tests: the tests before a victim halved file by file
first, then inside the one file kept.

Among thousands of earlier tests a culprit sits in one file. The files are halved first: a
level runs the whole files of its first half before the victim
(`gpuci.evidence.search.waves`, in waves of speculated levels where slots are
idle), keeping that half where the victim shows its finding, else the second half, inferred;
ceil(log2 files) levels. The file kept is never run alone: the halving of its tests
(`gpuci.evidence.search.bisect`) runs what that run would, ceil(log2 tests in
the file) levels, then its last candidate and the confirmations. Every step is a replay of
whole files in the suite's order, the victim's own file cut at the victim: the interpreter
imports only the files it needs.

Where the run of the last candidate refutes the inference (the finding needs tests of two
files, or of two parts of one), the search starts again checked (`checked_by_files`),
every run with nothing beside it: the whole replay, unless the file kept showed it alone;
then each level's halves of the files, the second run only where the first does not show
it, keeping one that shows it, or both where neither does (the finding needs tests of
each); then, inside each file kept, its tests halved the same way with the other files'
tests before them. Its runs are bounded too, before it starts (`checked_bound`), and the
set it names needs every one of its tests together.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuci.evidence.probe import Prober, ProbeRun
from gpuci.evidence.search.step import (
    Search,
    never_shown,
    probe_after,
    record,
    run_step,
    shows,
)
from gpuci.evidence.search.waves import Step, Wave, run_wave, run_wave_with_whole
from gpuci.evidence.victims import Task
from gpuci.model import Probe
from gpuci.run.proc.discover import file_of


@dataclass(frozen=True, slots=True)
class Files:
    """The tests before a victim by file, in the order they ran (a file's tests together)."""

    names: tuple[str, ...]
    tests: dict[str, tuple[str, ...]]

    def before(self, files: Sequence[str]) -> list[str]:
        """The tests of `files`, in the order they ran."""
        return [t for f in files for t in self.tests[f]]


def by_file(candidates: Sequence[str]) -> Files | None:
    """The candidates grouped by file, where the files are worth halving first (each step a
    replay of whole files, the later ones of one): two files or more, one of them with
    several tests, each file's tests together in the order they ran. None otherwise (the
    tests are halved as they are). Its levels, ceil(log2 files) + ceil(log2 tests in the
    file kept), are at least ceil(log2 n): as many where files are even, one more where the
    two ceilings each round up."""
    tests: dict[str, list[str]] = {}
    last = ""
    for test in candidates:
        file = file_of(test)
        if "::" not in test or (file in tests and file != last):
            return None  # a collected file, or a file whose tests did not run together
        tests.setdefault(file, []).append(test)
        last = file
    if len(tests) < 2 or all(len(t) == 1 for t in tests.values()):
        return None
    return Files(tuple(tests), {f: tuple(t) for f, t in tests.items()})


@dataclass(slots=True)
class FileStage:
    """What the halving of files left: the files still in question, and whether a run
    showed the finding after exactly their tests (else the last file was inferred)."""

    files: list[str]
    confirmed: bool
    cut: bool = False  # the budget (or a stop) ended it before one file was left


def halve_files(prober: Prober, task: Task, files: Files, search: Search) -> FileStage | None:
    """The files halved, in waves, down to one (never run alone: inferred); None where the
    whole replay, run beside the first wave, never showed the finding (the note says so)."""
    current, confirmed = list(files.names), False
    speculates = not task.strict and not task.loadable  # as the halving of tests does
    doubted = speculates and bool(task.pairs)  # as `bisect` does

    def step(part: Sequence[str], cancel: threading.Event | None) -> tuple[Probe, ProbeRun]:
        return run_step(prober, task, files.before(part), cancel=cancel)

    while len(current) > 1:
        if prober.exhausted() or prober.stopping():
            search.note = (
                f"search cut by budget after {len(search.probes)} run(s), down to"
                f" {len(current)} of {len(files.names)} files"
            )
            return FileStage(current, confirmed, cut=True)
        width = max(1, prober.admission.idle()) if speculates else 1
        wave = searched_wave(
            prober,
            task,
            search,
            current,
            width,
            whole=doubted and width > 1,
            step=step,
            singles=False,
        )
        doubted = False
        if wave is None:
            return None
        current, confirmed = wave.current, wave.confirmed
    return FileStage(current, confirmed)


def searched_wave(
    prober: Prober,
    task: Task,
    search: Search,
    current: list[str],
    width: int,
    *,
    whole: bool,
    step: Step,
    singles: bool = True,
) -> Wave | None:
    """One wave of a halving, recorded in `search`; with the `whole` replay in one of its
    places: None where that run did not show the finding (the note says so)."""

    def shown(probe: Probe) -> bool:
        return bool(shows(task, probe.outcome))

    if whole:
        wave, replayed = run_wave_with_whole(prober, current, width, step, shown, singles=singles)
    else:
        wave, replayed = run_wave(prober, current, width, step, shown, singles=singles), None
    for probe, ran in wave.used:
        record(task, search, probe, ran)
    search.waves += 1
    search.in_waves += len(wave.used)
    search.ahead += len(wave.used) - 1 + wave.losers  # all but each wave's first
    search.losers += wave.losers
    search.killed += wave.killed
    if replayed is None:
        return wave
    search.whole = True
    search.in_waves += 1
    search.ahead += 1
    if not record(task, search, *replayed):
        search.note = never_shown(task, search)
        return None
    return wave


MOST_SET = 2  # the items a checked stage may keep at a level (a culprit set of two)


def checked_bound(files: int, in_file: int, *, whole: bool) -> int:
    """The most runs `checked_by_files` may take, stated before it runs: the whole replay
    (unless the file kept showed it alone already), then two runs a level over the `files`
    for each of up to MOST_SET items kept, and the same over the tests of a file (the
    largest, `in_file` tests). A finding that needs more, or answers that went both ways,
    stop it there, and nothing is named."""
    return int(whole) + 2 * MOST_SET * (_levels(files) + _levels(in_file))


def _levels(n: int) -> int:
    return math.ceil(math.log2(max(n, 1)))


def checked_by_files(
    prober: Prober, task: Task, files: Files, units: Sequence[str], search: Search, *, shown: bool
) -> tuple[list[str], bool] | None:
    """Where the inferred halving was refuted: among `units` (files), the smallest set of
    tests after which the victim shows its finding, each level checked (`_smallest`): the
    files first, then inside each file kept, the other files' tests before it; the set and
    whether it needs several tests, or None (the note says why). Every run has nothing
    beside it (a refutation may be the load's doing); the whole replay of `units` runs
    first unless `shown` (a strict run of it showed the finding). Its bound goes into the
    search's `checked` (`checked_bound`), and it never runs past it."""
    whole = files.before(units)
    largest = max(len(files.tests[f]) for f in units)
    search.checked = checked_bound(len(units), largest, whole=not shown)
    end = len(search.probes) + search.checked

    def runs_left() -> bool:
        if prober.exhausted() or prober.stopping():
            search.note = f"search cut by budget after {len(search.probes)} run(s)"
            return False
        if len(search.probes) >= end:
            search.note = (
                f"search stopped at its bound after {len(search.probes)} run(s): the finding"
                f" needs more than {MOST_SET} tests of as many parts, or went both ways"
            )
            return False
        return True

    def shown_after(tests: frozenset[str]) -> bool | None:
        """Whether it shows the finding after `tests` (strictly); None: no run left."""
        if not runs_left():
            return None
        before = [t for t in whole if t in tests]
        return probe_after(prober, task, search, before, strict=True)

    if not shown:
        whole_shown = shown_after(frozenset(whole))
        if not whole_shown:
            if whole_shown is not None:
                search.note = never_shown(task, search)
            return None
    kept = _smallest(
        list(units),
        frozenset(),
        tests_of=files.tests.__getitem__,
        shown_after=shown_after,
    )
    if kept is None:
        return None
    chosen = {f: files.tests[f] for f in kept}
    for file in kept:  # inside each file, the other files' tests (as narrowed) before it
        others = frozenset(t for f in kept if f != file for t in chosen[f])
        narrowed = _smallest(list(chosen[file]), others, tests_of=_one, shown_after=shown_after)
        if narrowed is None:
            return None
        chosen[file] = tuple(narrowed)
    tests = frozenset(t for f in kept for t in chosen[f])
    return [t for t in whole if t in tests], len(tests) > 1


def _one(test: str) -> tuple[str, ...]:
    return (test,)


def _smallest(
    items: list[str],
    fixed: frozenset[str],
    *,
    tests_of: Callable[[str], Sequence[str]],
    shown_after: Callable[[frozenset[str]], bool | None],
) -> list[str] | None:
    """The fewest of `items` (files or tests) after whose tests, with the `fixed` tests,
    the victim shows its finding: a half that shows it with them is kept (the second run
    only where the first does not); where neither does it needs some of each: the first
    half narrowed with the whole second before it, then the second with what was kept of
    the first. Each node of the halving runs at most twice: 2 runs a level for each item
    kept. None where no run was left (`shown_after` said None; the note says why)."""
    if len(items) == 1:
        return items
    middle = (len(items) + 1) // 2
    first, second = items[:middle], items[middle:]

    def tests(part: Sequence[str]) -> frozenset[str]:
        return frozenset(t for item in part for t in tests_of(item))

    def smallest(part: list[str], with_: frozenset[str]) -> list[str] | None:
        return _smallest(part, with_, tests_of=tests_of, shown_after=shown_after)

    for part in (first, second):
        shown = shown_after(fixed | tests(part))
        if shown is None:
            return None
        if shown:
            return smallest(part, fixed)
    kept = smallest(first, fixed | tests(second))
    rest = None if kept is None else smallest(second, fixed | tests(kept))
    return None if kept is None or rest is None else kept + rest
