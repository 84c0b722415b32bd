"""The ledger's hint in a culprit search, against the fake prober of the bisection's tests:
a right hint names the culprit in two runs, a wrong one costs one run before the search
goes on as without it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from gpuci.evidence.requests import Request
from gpuci.evidence.search.hinted import LEDGER, hinted_first, prepare_hinted
from gpuci.model import Category, Outcome
from tests.test_culprit_search import CANDIDATES, FakeProber, task


def fails_after(culprit: str) -> FakeProber:
    return FakeProber(lambda ids, _: Outcome.FAILED if culprit in ids else Outcome.PASSED)


def test_no_hint_leaves_the_search_to_the_rest() -> None:
    prober = fails_after(CANDIDATES[5])
    assert hinted_first(prober, task(Category.ORDER_DEPENDENT)) is None
    assert prober.runs == []


def test_a_right_hint_names_the_culprit_in_two_runs() -> None:
    prober = fails_after(CANDIDATES[11])
    hinted = dataclasses.replace(
        task(Category.ORDER_DEPENDENT), hinted=(CANDIDATES[11],), hint=LEDGER
    )
    search = hinted_first(prober, hinted)
    assert search is not None and search.culprits == (CANDIDATES[11],)
    assert prober.runs == [[CANDIDATES[11], hinted.victim]] * 2  # the hint, its confirmation
    assert search.probes[0].kind == LEDGER
    assert search.note == "ledger: 2 run(s), the ledger's hint confirmed"


def test_a_hint_of_a_files_tests_is_narrowed_among_them() -> None:
    prober = fails_after(CANDIDATES[6])
    hinted = dataclasses.replace(
        task(Category.ORDER_DEPENDENT), hinted=CANDIDATES[4:8], hint=LEDGER
    )
    search = hinted_first(prober, hinted)
    assert search is not None and search.culprits == (CANDIDATES[6],)
    assert prober.runs[0] == [*CANDIDATES[4:8], hinted.victim]
    assert all(set(run) <= {*CANDIDATES[4:8], hinted.victim} for run in prober.runs)
    assert len(prober.runs) <= 5


def test_a_wrong_hint_costs_one_run_then_the_bisection_is_the_proof() -> None:
    prober = fails_after(CANDIDATES[2])
    hinted = dataclasses.replace(
        task(Category.ORDER_DEPENDENT), hinted=(CANDIDATES[9],), hint=LEDGER
    )
    search = hinted_first(prober, hinted, roots=[(CANDIDATES[3],)])
    assert search is not None and search.culprits == (CANDIDATES[2],)
    assert prober.runs[0] == [CANDIDATES[9], hinted.victim]
    assert prober.runs[1] == [CANDIDATES[3], hinted.victim]  # an earlier victim's culprit next
    assert search.probes[0].kind == LEDGER and len(search.probes) == len(prober.runs)
    assert search.note.endswith("(the ledger's hint did not show it)")


class Preparing:
    """Records what `prepare_hinted` starts ahead, as a prober's `prepare` takes it."""

    def __init__(self) -> None:
        self.started: list[tuple[list[str], int]] = []

    def prepare(self, ids: list[str], *, strict: bool, copies: int) -> None:
        assert strict  # a confirmation is strict, and the narrowing's runs
        self.started.append((list(ids), copies))

    def start_ahead(self, requests: Iterable[Request]) -> None:
        for request in requests:
            self.prepare(list(request.ids), strict=request.strict, copies=request.copies)


def test_a_hint_of_one_test_starts_its_run_and_confirmation_ahead() -> None:
    prober = Preparing()
    hinted = dataclasses.replace(
        task(Category.ORDER_DEPENDENT), hinted=(CANDIDATES[11],), hint=LEDGER
    )
    unhinted = task(Category.ORDER_DEPENDENT)
    prepare_hinted(prober, [hinted, unhinted])  # type: ignore[arg-type]
    # the hint's run and its confirmation are the same run: two of its interpreter
    assert prober.started == [([CANDIDATES[11], hinted.victim], 2)]


def test_a_hint_of_two_tests_starts_each_ones_runs_ahead_too() -> None:
    prober = Preparing()
    two = (CANDIDATES[3], CANDIDATES[9])
    hinted = dataclasses.replace(task(Category.ORDER_DEPENDENT), hinted=two, hint=LEDGER)
    prepare_hinted(prober, [hinted])  # type: ignore[arg-type]
    victim = hinted.victim
    assert ([*two, victim], 1) in prober.started
    for one in two:  # narrowed to it, then confirmed: two of each
        assert ([one, victim], 2) in prober.started
    assert len(prober.started) == 3
    many = dataclasses.replace(hinted, hinted=CANDIDATES[:5])
    prober.started.clear()
    prepare_hinted(prober, [many])  # type: ignore[arg-type]
    assert prober.started == []  # more than a few: the slots' cores are worth more
