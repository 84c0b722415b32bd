"""Strict: a screen's finding stands only where a strict run shows it."""

from __future__ import annotations

from gpuci.evidence.classify import Classified
from gpuci.evidence.notes import SAME_RUN_BOTH_WAYS
from gpuci.evidence.results import ModeResults
from gpuci.evidence.strict import confirm_strictly
from gpuci.model import Category, Mode, ModeRun, Outcome, Probe, TestEvidence, TestResult

VICTIM = "test_b.py::test_count"


def results(*, beside: tuple[Mode, ...]) -> dict[Mode, ModeResults]:
    runs = {
        mode: ModeRun(mode=mode, command=("gpuci",), rootdir="/x", workers=2, beside=beside)
        for mode in (Mode.SUITE, Mode.PARALLEL)
    }
    return {
        m: ModeResults(run=r, parts=(r,), part_shards=(1,), total_shards=1) for m, r in runs.items()
    }


def suspect(category: Category = Category.CONCURRENCY) -> Classified:
    failed = TestResult(id=VICTIM, file="test_b.py", outcome=Outcome.FAILED)
    return Classified(
        id=VICTIM,
        category=category,
        outcomes={Mode.SUITE: Outcome.PASSED, Mode.PARALLEL: Outcome.FAILED},
        reruns=(Outcome.PASSED, Outcome.PASSED),
        results={Mode.PARALLEL: failed},
    )


NO_PAIR_FAILED = TestEvidence(
    id=VICTIM,
    alone=(Outcome.PASSED, Outcome.PASSED),
    search="not reproduced: no pair showed it twice (1 runs)",
    probes=(Probe(count=1, shown=("test_a.py",), outcome=Outcome.PASSED),),
)


def test_a_screen_failure_no_strict_run_reproduces_is_passed_with_a_note() -> None:
    found = confirm_strictly(suspect(), NO_PAIR_FAILED, results(beside=(Mode.SUITE,)))
    assert found.category is Category.PASSED
    assert found.note == (
        "failed once under the check's combined load (parallel); passed in 3 strict runs"
    )
    assert found.strict == "alone-runs; the pair with a co-running file"


def test_with_serial_modes_the_category_stands() -> None:
    found = confirm_strictly(suspect(), NO_PAIR_FAILED, results(beside=()))
    assert found.category is Category.CONCURRENCY
    assert not found.note


def test_a_search_the_budget_cut_leaves_the_category_standing() -> None:
    cut = TestEvidence(id=VICTIM, alone=(Outcome.PASSED,), search="not searched (budget)")
    found = confirm_strictly(suspect(), cut, results(beside=(Mode.SUITE,)))
    assert found.category is Category.CONCURRENCY
    assert not found.note and not found.strict


def test_a_failing_pair_confirms_it_and_says_so() -> None:
    paired = TestEvidence(
        id=VICTIM, culprits=("test_a.py",), search="pair: 2 run(s), confirmed twice"
    )
    found = confirm_strictly(suspect(), paired, results(beside=(Mode.SUITE,)))
    assert found.category is Category.CONCURRENCY
    assert found.strict == "the pair with a co-running file"
    # a screen's order-dependent suspect whose pair failed instead is concurrency
    found = confirm_strictly(
        suspect(Category.ORDER_DEPENDENT), paired, results(beside=(Mode.SUITE,))
    )
    assert found.category is Category.CONCURRENCY


def test_alone_runs_decide_a_real_failure() -> None:
    found = confirm_strictly(suspect(Category.FAILED), None, results(beside=(Mode.SUITE,)))
    assert found.category is Category.FAILED
    assert found.strict == "alone-runs"


def test_a_replay_that_went_both_ways_makes_the_victim_flaky() -> None:
    both = TestEvidence(
        id=VICTIM,
        alone=(Outcome.PASSED,),
        search=f"not reproduced: it failed after 1 test(s), then not ({SAME_RUN_BOTH_WAYS})",
    )
    for category in (Category.ORDER_DEPENDENT, Category.DEPENDS_ON_OTHERS):
        found = confirm_strictly(suspect(category), both, results(beside=(Mode.SUITE,)))
        assert found.category is Category.FLAKY
        assert found.strict == "the same replay of the tests before it, twice: once each way"


def test_a_time_out_only_under_the_screens_load_is_passed_with_a_note() -> None:
    # CuPy's test_reuse_between_thread_same_stream hung once in the parallel screen of an
    # H100 check; isolated and its alone-run passed it
    hung = Classified(
        id=VICTIM,
        category=Category.TIMED_OUT,
        outcomes={
            Mode.SUITE: Outcome.PASSED,
            Mode.PARALLEL: Outcome.TIMED_OUT,
            Mode.ISOLATED: Outcome.PASSED,
        },
        reruns=(Outcome.PASSED,),
        results={},
    )
    found = confirm_strictly(hung, None, results(beside=(Mode.SUITE,)))
    assert found.category is Category.PASSED
    assert found.note == (
        "timed out once under the check's combined load (parallel); passed in 2 strict runs"
    )
    # one that hangs alone too, or under --serial-modes, stays timed-out
    alone_too = confirm_strictly(
        Classified(
            id=VICTIM,
            category=Category.TIMED_OUT,
            outcomes=hung.outcomes,
            reruns=(Outcome.TIMED_OUT,),
            results={},
        ),
        None,
        results(beside=(Mode.SUITE,)),
    )
    assert alone_too.category is Category.TIMED_OUT
    serial = confirm_strictly(hung, None, results(beside=()))
    assert serial.category is Category.TIMED_OUT
