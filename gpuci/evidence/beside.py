"""Beside: which files ran at the same time as a test in the check's screens.

The screens run the suite interpreter, the parallel files and the threads files at once, so
a failure in one of them may be another's doing. These are the files to pair a suspect with
(`gpuci.evidence.kinds.culprit_search.culprits`), longest overlap first: for a parallel
file, the parallel files beside it, then the threads files and the files the suite
interpreter ran meanwhile; for a test of the suite interpreter, the parallel and threads
files that ran while it did. The suite interpreter's tests are placed on its clock end to
end, from its start-up on.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuci.evidence.orders import MAX_BESIDE, ran_beside
from gpuci.evidence.results import ModeResults
from gpuci.model import Mode

Span = tuple[str, float, float]  # a file (or a test's file), its start and end


def co_runners(results: Mapping[Mode, ModeResults], file: str) -> tuple[str, ...]:
    """The files that ran beside `file`'s parallel interpreter, longest overlap first."""
    parallel = results[Mode.PARALLEL]
    found = ran_beside(parallel, file, limit=None)
    mine = next((f for p in parallel.parts for f in p.files if f.file == file), None)
    if mine is None or not parallel.run.beside:
        return tuple(found[:MAX_BESIDE])
    spans = _file_spans(results, Mode.THREADS) + _suite_spans(results)
    more = [f for f in _by_overlap(spans, file, mine.start, mine.end) if f not in found]
    return tuple((found + more)[:MAX_BESIDE])


def beside_suite_test(results: Mapping[Mode, ModeResults], test_id: str) -> tuple[str, ...]:
    """The parallel and threads files that ran while the suite interpreter ran `test_id`."""
    span = next(((s, e) for i, s, e in _suite_spans(results, ids=True) if i == test_id), None)
    if span is None:
        return ()
    spans = _file_spans(results, Mode.PARALLEL) + _file_spans(results, Mode.THREADS)
    file = test_id.partition("::")[0]
    return tuple(_by_overlap(spans, file, *span)[:MAX_BESIDE])


def _file_spans(results: Mapping[Mode, ModeResults], mode: Mode) -> list[Span]:
    parts = results[mode].parts if mode in results else ()
    return [(f.file, f.start, f.end) for part in parts for f in part.files]


def _suite_spans(results: Mapping[Mode, ModeResults], *, ids: bool = False) -> list[Span]:
    """The suite interpreter's tests on its clock, end to end (by file, or by test id)."""
    spans: list[Span] = []
    for part in results[Mode.SUITE].parts if Mode.SUITE in results else ():
        if part.files and part.files[0].interpreters:
            first = part.files[0].interpreters[0]
            # one held since before the screens (`gpuci.run.proc.held`: started at a negative
            # time, its start-up ending before the screens' clock) ran its first test once
            # taken, as the screens started
            clock = max(first.start + (first.startup_s or 0.0), 0.0)
            for test in part.tests:
                spans.append((test.id if ids else test.file, clock, clock + test.duration))
                clock += test.duration
    return spans


def _by_overlap(spans: list[Span], file: str, start: float, end: float) -> list[str]:
    """The files of `spans` overlapping [start, end], longest overlap first; never `file`
    itself: two copies of one file at once happen only in the screens (a big test's copies
    run out of memory together), never in a run of one mode."""
    overlaps: dict[str, float] = {}
    for name, first, last in spans:
        overlap = min(last, end) - max(first, start)
        if overlap > 0 and name != file:
            overlaps[name] = overlaps.get(name, 0.0) + overlap
    return sorted(overlaps, key=lambda f: -overlaps[f])
