"""Claims: a finding that names another test stands only on runs that show it both ways."""

from __future__ import annotations

from gpuci.evidence.claims import Claim, Standing, judge, shown_twice
from gpuci.model import Outcome

F, P, N, T = Outcome.FAILED, Outcome.PASSED, Outcome.NOT_RUN, Outcome.TIMED_OUT


def claim(failing: tuple[Outcome, ...], other: tuple[Outcome, ...]) -> Standing:
    return judge(Claim(victim="test_v.py::test_v", failing=failing, other=other))


def test_a_claim_stands_on_a_repeated_failure_and_a_pass_without() -> None:
    assert claim((F, F), (P,)) is Standing.STANDS
    assert claim((F, T), (P, P)) is Standing.STANDS  # a timeout shows a failure too


def test_a_failing_run_seen_once_blames_no_one() -> None:
    assert claim((F,), (P,)) is Standing.UNREPEATED
    assert claim((F, N), (P,)) is Standing.UNREPEATED  # a run that never reached it


def test_a_failing_command_that_went_both_ways_is_flaky() -> None:
    assert claim((F, P), (P,)) is Standing.FLAKY
    assert claim((P, F, F), ()) is Standing.FLAKY  # whatever else was run


def test_a_without_half_that_fails_too_kills_the_claim() -> None:
    assert claim((F, F), (F,)) is Standing.FAILS_WITHOUT
    assert claim((F, F), (P, F)) is Standing.FAILS_WITHOUT


def test_a_claim_never_run_without_what_it_names_is_unasked() -> None:
    assert claim((F, F), ()) is Standing.UNASKED
    assert claim((F, F), (N,)) is Standing.UNASKED


def test_shown_twice_counts_failures_of_one_command() -> None:
    assert shown_twice((F, T)) and not shown_twice((F, P, N))
