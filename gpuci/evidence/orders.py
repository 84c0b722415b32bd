"""Orders: who ran before whom in a mode's interpreters, which files ran beside a file, and
which the suite interpreter collected with a test (pytest imports every file before the
first test: `collected_files`, the provider search's and the budget's).

Read by the commands that show a finding (`gpuci.evidence.reproduce`: the tests before it,
the files beside it) and by the evidence that replays orders (the culprit searches).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuci.evidence.results import ModeResults
from gpuci.model import WHOLE_SUITE_MODES, Mode, Outcome, TestResult
from gpuci.run.proc.discover import file_of
from gpuci.run.proc.journal import COLLECTION_ERROR

MAX_PRECEDING = 50  # tests or files a reproduce command puts before the test
MAX_BESIDE = 7  # files a concurrency reproduce command runs beside the test
RESTARTING = frozenset({Outcome.CRASHED, Outcome.TIMED_OUT})  # the next test gets a new interpreter


@dataclass(frozen=True, slots=True, kw_only=True)
class Order:
    """Who ran before whom in one mode's interpreters."""

    segments: list[list[TestResult]]  # one per interpreter, in the order they ran
    blocks: list[list[tuple[str, int]]]  # per segment: (file, position of its first test)
    mid_file: list[bool]  # per segment: it began in the middle of a file, after a crash
    where: dict[str, tuple[int, int, int]]  # test id -> (segment, position, block)


def interpreter_order(results: ModeResults) -> Order:
    """Split a mode's tests into interpreters: per file (but in the whole suite's: suite,
    reversed, shuffled), and at crashes."""
    order = Order(segments=[], blocks=[], mid_file=[], where={})
    per_file = results.run.mode not in WHOLE_SUITE_MODES
    for part in results.parts:
        current: list[TestResult] = []
        blocks: list[tuple[str, int]] = []
        previous: TestResult | None = None
        for test in part.tests:
            if test.outcome is Outcome.NOT_RUN or test.inferred:
                continue  # it did not run (or only another mode did), so it ran before nothing
            # The runner resumes in a fresh interpreter after a crash or a timeout.
            after_crash = previous is not None and previous.outcome in RESTARTING
            same_file = previous is not None and previous.file == test.file
            if previous is None or after_crash or (per_file and not same_file):
                current, blocks = [], []
                order.segments.append(current)
                order.blocks.append(blocks)
                order.mid_file.append(after_crash and same_file)
            if not blocks or blocks[-1][0] != test.file:
                blocks.append((test.file, len(current)))
            order.where.setdefault(
                test.id, (len(order.segments) - 1, len(current), len(blocks) - 1)
            )
            current.append(test)
            previous = test
    return order


def tests_before(order: Order, test_id: str) -> list[str]:
    """Every test that ran before `test_id` in its interpreter, in order ([] where it did
    not run, or ran first)."""
    place = order.where.get(test_id)
    if place is None:
        return []
    segment, position, _ = place
    return [t.id for t in order.segments[segment][:position]]


def first_in_interpreter(order: Order, test_id: str) -> bool:
    place = order.where.get(test_id)
    return place is not None and place[1] == 0


def ran_before(order: Order, test_id: str, *, by_file: bool) -> tuple[list[str], int]:
    """What ran before the test in its interpreter, nearest last, and how many were cut.

    Test ids, or in suite mode the files before the test's own (shorter, and what a plain
    `pytest` run does); the nearest MAX_PRECEDING are kept, the likeliest polluters.
    """
    place = order.where.get(test_id)
    if place is None:
        return [], 0
    segment, position, block = place
    tests = order.segments[segment]
    if not by_file or block == 0:
        start = max(0, position - MAX_PRECEDING)
        return [t.id for t in tests[start:position]], start
    blocks = order.blocks[segment]
    start = max(0, block - MAX_PRECEDING)
    args = [file for file, _ in blocks[start:block]]
    if start == 0 and order.mid_file[segment]:
        # The interpreter began in the middle of the first file (after a crash there):
        # only that file's later tests ran in it, so name them instead of the file.
        end = blocks[1][1]
        head = max(0, end - MAX_PRECEDING)
        return [t.id for t in tests[head:end]] + args[1:], head
    return args, start


def ran_beside(results: ModeResults, file: str, *, limit: int | None = MAX_BESIDE) -> list[str]:
    """The files whose interpreters overlapped this file's in the parallel run, longest
    overlap first."""
    for part in results.parts:
        mine = next((f for f in part.files if f.file == file), None)
        if mine is not None:
            overlaps = [
                (min(f.end, mine.end) - max(f.start, mine.start), f.file)
                for f in part.files
                if f.file != file and f.start < mine.end and mine.start < f.end
            ]
            overlaps.sort(key=lambda o: -o[0])
            return [f for _, f in overlaps][:limit]
    return []


def collected_files(results: Mapping[Mode, ModeResults], victim: str) -> tuple[str, ...]:
    """The other files the suite interpreter collected where the victim passed there, in
    its order; none elsewhere. A victim that is a file (it could not be collected alone)
    passed where its tests ran, and only the files collected before it can have mattered."""
    suite = results.get(Mode.SUITE)
    if suite is None:
        return ()
    outcomes = {t.id: t.outcome for t in suite.run.tests}
    file = file_of(victim)
    if "::" not in victim:
        ran = [t for t in suite.run.tests if t.file == file and t.outcome is not Outcome.NOT_RUN]
        if victim in outcomes or not ran:
            return ()
    elif outcomes.get(victim) is not Outcome.PASSED:
        return ()
    # a file that did not collect would end the run before its first test
    broken = {t.file for t in suite.run.tests if t.message.startswith(COLLECTION_ERROR)}
    files = list(dict.fromkeys(t.file for t in suite.run.tests if t.file not in broken))
    if "::" not in victim:
        files = files[: files.index(file)]
    return tuple(f for f in files if f != file)
