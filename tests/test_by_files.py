"""The culprit search by files, then tests, against a fake prober: its runs against its
bound (ceil(log2 files) + ceil(log2 tests in the file) + its confirmations), its replays of
whole files, and a culprit set that needs tests of two files."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from test_culprit_search import VICTIM, FakeProber

from gpuci.evidence.search.bisect import REFUTED, bisect
from gpuci.evidence.search.by_files import by_file, checked_bound
from gpuci.evidence.victims import Task
from gpuci.model import Category, Outcome
from gpuci.run.proc.discover import file_of
from gpuci.steps import CONFIRMING

FILES, PER_FILE = 12, 5
CANDIDATES = tuple(f"test_{f:02d}.py::test_{t}" for f in range(FILES) for t in range(PER_FILE))


def task(category: Category = Category.ORDER_DEPENDENT) -> Task:
    return Task(victim=VICTIM, category=category, candidates=CANDIDATES, rank=(0, 0))


def fails_after(*needed: str) -> FakeProber:
    return FakeProber(lambda ids, _: Outcome.FAILED if set(needed) <= set(ids) else Outcome.PASSED)


def whole_files(run: Sequence[str]) -> bool:
    """Whether a run's tests before the victim are every test of each of their files."""
    before = run[:-1]
    return all(
        [t for t in CANDIDATES if file_of(t) == f] == [t for t in before if file_of(t) == f]
        for f in {file_of(t) for t in before}
    )


@pytest.mark.parametrize("place", [0, 31, 33, 59])
def test_a_culprit_among_twelve_files_is_found_by_files_then_tests(place: int) -> None:
    culprit = CANDIDATES[place]
    prober = fails_after(culprit)
    search = bisect(prober, task())  # type: ignore[arg-type]
    assert search.culprits == (culprit,)
    assert search.note.startswith("bisection: ") and "by files, then tests" in search.note
    steps = search.steps
    assert steps is not None and (steps.files, steps.in_file) == (FILES, PER_FILE)
    levels = math.ceil(math.log2(FILES)) + math.ceil(math.log2(PER_FILE))
    assert steps.bound == levels + CONFIRMING
    assert steps.runs == len(prober.runs) <= steps.bound
    # the file levels replay whole files in the suite's order, then only the culprit's file
    levels = math.ceil(math.log2(FILES))
    assert all(whole_files(run) for run in prober.runs[: levels - 1])
    assert all({file_of(t) for t in run[:-1]} <= {file_of(culprit)} for run in prober.runs[levels:])
    assert prober.runs[-1] == [culprit, VICTIM]


def test_a_provider_is_found_by_files_then_tests() -> None:
    provider = CANDIDATES[17]
    prober = FakeProber(lambda ids, _: Outcome.PASSED if provider in ids else Outcome.FAILED)
    search = bisect(prober, task(Category.DEPENDS_ON_OTHERS))  # type: ignore[arg-type]
    assert search.culprits == (provider,)
    assert search.steps is not None and search.steps.runs <= search.steps.bound


def test_a_finding_that_needs_tests_of_two_files_is_checked_within_its_bound() -> None:
    # it fails only after a test of file 2 and one of file 9: every inferred level keeps one
    # half of the files, the run of the last candidate refutes it; the checked stage runs
    # the whole replay, keeps both halves of the files where neither alone shows it, then
    # narrows each file's tests with the other's before them
    needed = (CANDIDATES[2 * PER_FILE + 3], CANDIDATES[9 * PER_FILE + 1])
    prober = fails_after(*needed)
    search = bisect(prober, task())  # type: ignore[arg-type]
    assert search.culprits == needed
    assert REFUTED in search.note and "needs all 2 together" in search.note
    steps = search.steps
    assert steps is not None and steps.checked == checked_bound(FILES, PER_FILE, whole=True)
    assert steps.runs == len(prober.runs) <= steps.bound
    assert prober.runs[-1] == [*needed, VICTIM]
    # the checked stage's runs had nothing beside them (a refutation may be the load's)
    assert all(prober.strict[-(steps.runs - 6) :])


def test_a_checked_stage_whose_answers_go_both_ways_stops_at_its_bound() -> None:
    # the halving is refuted (it needs a test of file 2 and one of file 9); from the
    # checked stage's whole replay on, it fails every other run whatever ran before it:
    # no part is consistent, and the stage stops at its bound, naming nothing
    needed = {CANDIDATES[2 * PER_FILE + 3], CANDIDATES[9 * PER_FILE + 1]}
    checking = [False]

    def victim(ids: Sequence[str], n: int) -> Outcome:
        checking[0] = checking[0] or len(ids) - 1 == len(CANDIDATES)
        if checking[0]:
            return Outcome.FAILED if n % 2 else Outcome.PASSED
        return Outcome.FAILED if needed <= set(ids) else Outcome.PASSED

    prober = FakeProber(victim)
    search = bisect(prober, task())  # type: ignore[arg-type]
    assert search.culprits == ()
    assert search.steps is not None and search.steps.runs == len(prober.runs)
    assert search.steps.runs <= search.steps.bound, search.note


def test_a_finding_that_needs_two_tests_of_one_file_is_checked_inside_it() -> None:
    needed = (CANDIDATES[4 * PER_FILE], CANDIDATES[4 * PER_FILE + 4])
    prober = fails_after(*needed)
    search = bisect(prober, task())  # type: ignore[arg-type]
    assert search.culprits == needed
    assert search.steps is not None and search.steps.runs <= search.steps.bound


def test_tests_of_one_file_each_are_halved_as_tests() -> None:
    assert by_file([f"test_{i}.py::test_a" for i in range(8)]) is None
    assert by_file([f"test_a.py::test_{i}" for i in range(8)]) is None
    # a file collected, not run, is no file of tests to halve
    assert by_file(["test_a.py", "test_b.py::test_x", "test_b.py::test_y"]) is None
    files = by_file(["a.py::x", "a.py::y", "b.py::z"])
    assert files is not None and files.names == ("a.py", "b.py")


def test_a_search_the_budget_cuts_among_files_names_nothing() -> None:
    prober = fails_after(CANDIDATES[40])
    prober.budget_runs = 2
    search = bisect(prober, task())  # type: ignore[arg-type]
    assert search.culprits == () and "search cut by budget" in search.note
    assert search.steps is not None and search.steps.runs <= search.steps.bound
