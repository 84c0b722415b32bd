"""Classify: an isolated outcome a lazy isolated pass inferred (not ran) counts for nothing."""

from __future__ import annotations

import dataclasses

from gpuci.evidence.classify import classify_results, classify_test, ran_outcomes, timeouts_judged
from gpuci.evidence.results import ModeResults
from gpuci.model import Category, Mode, ModeRun, Outcome, TestResult

HOG = "test_hog.py::test_train"  # first in its file
LATER = "test_hog.py::test_small"
OOM = "OutOfMemoryError: out of memory allocating 52 GiB"


def _results(suite: Outcome) -> dict[Mode, ModeResults]:
    """The hog failed alike in the screens: parallel, and `suite`; its file not re-run."""
    hog = TestResult(id=HOG, file="test_hog.py", outcome=Outcome.FAILED, message=OOM)
    later = TestResult(id=LATER, file="test_hog.py", outcome=Outcome.PASSED)
    tests = {
        Mode.SUITE: (dataclasses.replace(hog, outcome=suite), later),
        Mode.PARALLEL: (hog, later),
        Mode.ISOLATED: tuple(dataclasses.replace(t, inferred=True) for t in (hog, later)),
    }
    found = {}
    for mode, its in tests.items():
        run = ModeRun(mode=mode, command=("gpuci",), rootdir="/x", workers=2, tests=its)
        found[mode] = ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)
    return found


def test_an_inferred_isolated_failure_first_in_its_file_is_not_flaky() -> None:
    # on the H100 both memory hogs came out flaky: the inferred failure read as a fresh
    # isolated one, first in its file, against a passing alone-run
    classified = classify_results(_results(Outcome.FAILED), {HOG: (Outcome.PASSED,)})[HOG]
    # failed after other tests in the suite, passes alone: the search takes it from here
    # (its replay, then the pair with a co-running file: concurrency)
    assert classified.category is Category.ORDER_DEPENDENT
    assert classified.outcomes[Mode.ISOLATED] is Outcome.FAILED  # still shown, as inferred
    assert ran_outcomes(classified.outcomes, classified.results)[Mode.ISOLATED] is Outcome.NOT_RUN


def test_without_the_suite_failing_it_is_concurrency() -> None:
    classified = classify_results(_results(Outcome.PASSED), {HOG: (Outcome.PASSED,)})[HOG]
    assert classified.category is Category.CONCURRENCY


def test_one_that_fails_alone_too_is_failed() -> None:
    alone = {HOG: (Outcome.FAILED, Outcome.FAILED)}
    assert classify_results(_results(Outcome.FAILED), alone)[HOG].category is Category.FAILED


def test_a_timeout_in_one_mode_beside_failures_in_the_others_is_a_note() -> None:
    # failed in isolated, parallel and suite after its file's first test, passed alone,
    # and hung in threads: order-dependent, the hang a note
    outcomes = {
        Mode.ISOLATED: Outcome.FAILED,
        Mode.PARALLEL: Outcome.FAILED,
        Mode.SUITE: Outcome.FAILED,
        Mode.THREADS: Outcome.TIMED_OUT,
    }
    judged, notes = timeouts_judged(outcomes, (Outcome.PASSED,))
    assert classify_test(judged, (Outcome.PASSED,)) is Category.ORDER_DEPENDENT
    assert notes == (
        "timed out in threads; the other modes and its alone-runs decide its category",
    )
    # it timed out wherever it failed: timed-out, as before
    for reruns in ((Outcome.PASSED,), (Outcome.TIMED_OUT,)):
        only = {Mode.SUITE: Outcome.TIMED_OUT, Mode.ISOLATED: Outcome.PASSED}
        judged, notes = timeouts_judged(only, reruns)
        assert classify_test(judged, reruns) is Category.TIMED_OUT and not notes
    # a failed alone-run beside a timeout in the only mode that ran it: failed, noted
    judged, notes = timeouts_judged({Mode.SUITE: Outcome.TIMED_OUT}, (Outcome.FAILED,))
    assert classify_test(judged, (Outcome.FAILED,)) is Category.FAILED and notes
