"""The culprit search's bisection against a fake prober: its answers, its bound, its doubts."""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

import gpuci.evidence.kinds.pairs
import gpuci.evidence.kinds.poisoned_runs
from gpuci.evidence.admission import Admission
from gpuci.evidence.claims import Standing
from gpuci.evidence.classify import Classified
from gpuci.evidence.context import Context
from gpuci.evidence.fingerprints import failure_kind
from gpuci.evidence.kinds.culprit_search.culprits import _replay
from gpuci.evidence.kinds.kind import standing
from gpuci.evidence.kinds.pairs import PairSearches
from gpuci.evidence.kinds.poisoned_runs import run_poisoned
from gpuci.evidence.notes import SAME_RUN_BOTH_WAYS, UNASKED
from gpuci.evidence.pairs import PARTNER_TRIES, Partnerable, search_pairs
from gpuci.evidence.poisoned import worth_poisoning
from gpuci.evidence.requests import Request
from gpuci.evidence.results import ModeResults
from gpuci.evidence.search.bisect import bisect, cascade
from gpuci.evidence.strict import SAME_PAIR, confirm_strictly
from gpuci.evidence.victims import Task as _Task
from gpuci.model import Category, Mode, ModeRun, Outcome, TestEvidence, TestResult
from gpuci.run.proc.discover import file_of
from gpuci.state.left import Ledger
from gpuci.steps import CONFIRMING

VICTIM = "test_v.py::test_victim"
CANDIDATES = tuple(f"test_{i:02d}.py::test_c" for i in range(16))

NO_PARTNERS = Partnerable(tests=frozenset(), passed_alone=frozenset())


@dataclass
class FakeRun:
    result: Outcome
    beside: bool = False  # another run overlapped it
    pending: object = None  # a speculated run, until settled
    killed: bool = False

    def outcome(self, test_id: str) -> Outcome:
        return self.result


@dataclass
class FakeProber:
    """Answers each run with `victim(ids, n)`: the victim's outcome on the n-th run."""

    victim: Callable[[Sequence[str], int], Outcome]
    budget_runs: int = 1000
    runs: list[list[str]] = field(default_factory=list)
    strict: list[bool] = field(default_factory=list)  # whether each run was asked strict
    admission: Admission = field(default_factory=Admission)  # one slot: one at a time
    expensive: bool = False  # its start-ups are cheap: nothing is held ahead
    hides_start_ups: bool = False  # nor prepared

    def exhausted(self) -> bool:
        return len(self.runs) >= self.budget_runs

    def stopping(self) -> bool:
        return False

    poisoned: bool = False  # the check runs poisoned already (--poison)

    def run(
        self,
        ids: Sequence[str],
        *,
        phase: str,
        label: str,
        env: object = None,
        strict: bool = False,
        collect: Sequence[str] = (),
        cancel: object = None,
        handed: object = None,
    ) -> FakeRun:
        self.runs.append(list(ids))
        self.strict.append(strict)
        return FakeRun(self.victim(ids, len(self.runs)), pending=cancel)

    def settle(self, ran: FakeRun, *, used: bool) -> None:
        pass

    def start_ahead(self, requests: Iterable[Request]) -> None:
        assert not list(requests) or self.hides_start_ups  # nothing asked where none is hidden


def _ctx(prober: FakeProber) -> Context:
    """A kind's context around a fake runner: no screens' results, progress told nowhere."""
    return Context(
        prober=prober,  # type: ignore[arg-type]
        results={},
        orders={},
        progress=io.StringIO(),
        ledger=Ledger(),
    )


def task(category: Category) -> _Task:
    return _Task(victim=VICTIM, category=category, candidates=CANDIDATES, rank=(0, 0))


def test_one_polluter_among_sixteen_is_found_within_the_bound() -> None:
    culprit = CANDIDATES[11]
    prober = FakeProber(lambda ids, _: Outcome.FAILED if culprit in ids else Outcome.PASSED)
    search = bisect(prober, task(Category.ORDER_DEPENDENT))
    assert search.culprits == (culprit,)
    # one run a level (the second half inferred), the inferred last one run, confirmed
    assert len(prober.runs) == math.ceil(math.log2(len(CANDIDATES))) + 2
    assert search.steps is not None and search.steps.runs == len(prober.runs)
    assert search.steps.bound == math.ceil(math.log2(len(CANDIDATES))) + CONFIRMING
    assert search.steps.waves == search.steps.runs  # one slot: each run is its own wave
    # every run is [candidates..., victim] in the order they first ran, the last two alike
    assert all(run[-1] == VICTIM for run in prober.runs)
    assert prober.runs[-1] == prober.runs[-2] == [culprit, VICTIM]
    # the confirmation that names the culprit (the command printed) has nothing beside it
    assert prober.strict[-1]


def test_a_provider_is_found_for_a_test_that_needs_one() -> None:
    provider = CANDIDATES[3]
    prober = FakeProber(lambda ids, _: Outcome.PASSED if provider in ids else Outcome.FAILED)
    search = bisect(prober, task(Category.DEPENDS_ON_OTHERS))
    assert search.culprits == (provider,)


def test_a_flaky_victim_gets_no_culprit_by_chance() -> None:
    # it passes and fails by turns, whatever ran before it
    prober = FakeProber(lambda _, n: Outcome.PASSED if n % 2 else Outcome.FAILED)
    search = bisect(prober, task(Category.DEPENDS_ON_OTHERS))
    assert search.culprits == ()
    assert search.note.startswith("not reproduced")


def test_a_cascade_names_an_earlier_culprit_only_when_it_shows_twice() -> None:
    culprit = CANDIDATES[2]
    sticky = FakeProber(lambda ids, _: Outcome.FAILED if culprit in ids else Outcome.PASSED)
    search = cascade(sticky, task(Category.ORDER_DEPENDENT), [(culprit,)])
    assert search is not None and search.culprits == (culprit,)
    assert sticky.runs == [[culprit, VICTIM]] * 2
    # a flaky victim fails after it once by chance, with nothing beside it, then passes
    # strictly: the same command went both ways, and nothing is named
    flaky = FakeProber(lambda _, n: Outcome.FAILED if n % 2 else Outcome.PASSED)
    search = cascade(flaky, task(Category.ORDER_DEPENDENT), [(culprit,)])
    assert search is not None and search.culprits == () and not search.contradicted
    assert SAME_RUN_BOTH_WAYS in search.note and len(flaky.runs) == 2
    assert flaky.strict[1]


def test_a_replay_that_went_both_ways_is_not_paired_as_well() -> None:
    # flaky by its own replay: pairing it with its co-runners spent runs that decide nothing
    flaky = FakeProber(lambda _, n: Outcome.FAILED if n % 2 else Outcome.PASSED)
    screened = dataclasses.replace(task(Category.ORDER_DEPENDENT), pairs=("test_x.py",))
    parallel = object()  # never read: a pair run would need the parallel screen's files
    search = _replay(flaky, parallel, screened, [], NO_PARTNERS)  # type: ignore[arg-type]
    assert SAME_RUN_BOTH_WAYS in search.note and search.culprits == ()
    assert all(run[-1] == VICTIM for run in flaky.runs)


def test_a_poisoned_failure_is_a_diagnosis_only_when_it_fails_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gpuci.evidence.kinds.poisoned_runs, "poisonable", lambda prober: True)
    reader = FakeProber(lambda _, n: Outcome.FAILED)
    found = run_poisoned(_ctx(reader), [VICTIM], {})
    assert found[VICTIM].poisoned is Outcome.FAILED and len(reader.runs) == 2
    flaky = FakeProber(lambda _, n: Outcome.FAILED if n % 2 else Outcome.PASSED)
    found = run_poisoned(_ctx(flaky), [VICTIM], {})
    assert found[VICTIM].poisoned is None
    assert SAME_RUN_BOTH_WAYS in found[VICTIM].search
    clean = FakeProber(lambda _, n: Outcome.PASSED)
    found = run_poisoned(_ctx(clean), [VICTIM], {VICTIM: TestEvidence(id=VICTIM)})
    assert found[VICTIM].poisoned is Outcome.PASSED and len(clean.runs) == 1


def test_a_search_cut_by_the_budget_names_no_culprit() -> None:
    culprit = CANDIDATES[5]
    prober = FakeProber(
        lambda ids, _: Outcome.FAILED if culprit in ids else Outcome.PASSED, budget_runs=3
    )
    search = bisect(prober, task(Category.ORDER_DEPENDENT))
    assert search.culprits == ()
    assert search.note.startswith("search cut by budget after 3 run(s), down to")


def test_a_screen_failure_the_whole_replay_never_shows_ends_its_halving_after_one_wave() -> None:
    # it failed in the suite screen beside a file of the parallel screen (a scratch file
    # both write): no replay of the tests before it fails it, and its pairs are what can
    whole = [*CANDIDATES, VICTIM]
    prober = FakeProber(lambda _, n: Outcome.PASSED, admission=Admission(slots=4))
    doubted = dataclasses.replace(task(Category.ORDER_DEPENDENT), pairs=("test_x.py",))
    search = bisect(prober, doubted)
    assert search.culprits == () and search.note.startswith("not reproduced")
    # one wave: the levels in three places (one of them off the path: a loser), the whole
    # replay in the fourth (before, the halving ran every level, its inferred last
    # candidate, then the whole replay: 6 runs)
    assert len(prober.runs) == 4 and prober.runs.count(whole) == 1
    assert search.steps is not None and search.steps.waves == 1
    assert (search.steps.runs, search.steps.losers) == (3, 1)


def test_the_whole_replay_beside_the_first_wave_costs_a_culprit_no_level() -> None:
    for culprit in (CANDIDATES[1], CANDIDATES[14]):
        prober = FakeProber(
            lambda ids, _, c=culprit: Outcome.FAILED if c in ids else Outcome.PASSED,  # type: ignore[misc]
            admission=Admission(slots=4),
        )
        doubted = dataclasses.replace(task(Category.ORDER_DEPENDENT), pairs=("test_x.py",))
        search = bisect(prober, doubted)
        assert search.culprits == (culprit,)
        assert search.steps is not None and search.steps.runs <= search.steps.bound
        # a level of the first wave showed it (the whole replay killed, never counted), or
        # none did and the whole replay's failure was waited for and counted; a refuted
        # halving would not run it again
        counted = [p.count for p in search.probes]
        assert counted.count(len(CANDIDATES)) == (culprit == CANDIDATES[14])


@dataclass
class FakePairProber(FakeProber):
    """Pair runs too: the victim's outcome on the n-th run, whatever runs beside it."""

    prepared: list[tuple[list[str], int]] = field(default_factory=list)  # sides, copies

    def run_together(
        self,
        groups: Sequence[tuple[Sequence[str], str | None]],
        *,
        phase: str,
        label: str,
    ) -> tuple[list[FakeRun], int]:
        self.runs.append([i for ids, _ in groups for i in ids])
        return self.answer(groups), len(groups)

    def start_ahead(self, requests: Iterable[Request]) -> None:
        """A pair's sides, declared at once, kept as one entry (their tests, their copies)."""
        requests = list(requests)
        sides = [r for r in requests if r.side]
        if sides:
            self.prepared.append(([i for r in sides for i in r.ids], sides[0].copies))
        super().start_ahead([r for r in requests if not r.side])

    def answer(self, groups: Sequence[tuple[Sequence[str], str | None]]) -> list[FakeRun]:
        """Each interpreter's run, the victim's first."""
        return [FakeRun(self.victim([], len(self.runs)))]


def pairs(prober: FakeProber, parallel: ModeResults, task: _Task, kind: str = "") -> Any:
    """The pair search of `task`'s victim, as the culprit search starts it."""
    return search_pairs(
        prober,  # type: ignore[arg-type]
        parallel,
        victim=task.victim,
        candidates=task.candidates,
        kind=kind,
        partnerable={"test_x.py::test_a"},
        passed_alone={"test_x.py::test_a"},  # in its own file alone (the isolated screen)
    )


def test_a_pair_that_went_both_ways_is_flaky_and_ends_the_search() -> None:
    # examples/gpu_polluted's alternating test failed beside each file, then passed beside
    # it: 16 pair runs, 8 failures, and the check called it passed "in 9 strict runs"
    tests = [
        TestResult(id=f"test_{f}.py::test_a", file=f"test_{f}.py", outcome=Outcome.PASSED)
        for f in "xyz"
    ]
    tests.append(TestResult(id=VICTIM, file="test_v.py", outcome=Outcome.FAILED))
    run = ModeRun(
        mode=Mode.PARALLEL, command=("gpuci",), rootdir="/x", workers=2, tests=tuple(tests)
    )
    parallel = ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)
    concurrency = dataclasses.replace(
        task(Category.CONCURRENCY), candidates=("test_x.py", "test_y.py", "test_z.py")
    )
    alternating = FakePairProber(lambda _, n: Outcome.FAILED if n % 2 else Outcome.PASSED)
    search = pairs(alternating, parallel, concurrency)
    assert len(alternating.runs) == 2 and search.culprits == ()
    # both sides started ahead: this pair's run and its confirmation, and the next pair's run
    assert alternating.prepared == [
        ([VICTIM, "test_x.py::test_a"], 2),
        ([VICTIM, "test_y.py::test_a"], 1),
    ]
    assert SAME_RUN_BOTH_WAYS in search.note and "beside test_x.py" in search.note
    evidence = TestEvidence(id=VICTIM, search=search.note, probes=tuple(search.probes))
    suspect = Classified(
        id=VICTIM,
        category=Category.CONCURRENCY,
        outcomes={Mode.PARALLEL: Outcome.FAILED},
        reruns=(Outcome.PASSED,),
        results={},
    )
    found = confirm_strictly(suspect, evidence, {Mode.PARALLEL: parallel})
    assert found.category is Category.FLAKY and found.strict == SAME_PAIR
    # a pair that fails twice names its partner
    always = FakePairProber(lambda _, n: Outcome.FAILED)
    assert pairs(always, parallel, concurrency).culprits == ("test_x.py",)


def test_a_pair_tries_to_see_its_partner_test_only_where_a_screen_saw_one() -> None:
    # two hogs: each failed out of memory in the parallel screen, whichever asked second;
    # boltons' scratch file: the victim failed, its partner file passed
    concurrency = dataclasses.replace(task(Category.CONCURRENCY), candidates=("test_x.py",))
    for partner_in_screen, runs in ((Outcome.FAILED, 2 + PARTNER_TRIES), (Outcome.PASSED, 2)):
        tests = (
            TestResult(
                id="test_x.py::test_a",
                file="test_x.py",
                outcome=partner_in_screen,
                message=OUT_OF_MEMORY if partner_in_screen is Outcome.FAILED else "",
            ),
            TestResult(id=VICTIM, file="test_v.py", outcome=Outcome.FAILED, message=OUT_OF_MEMORY),
        )
        run = ModeRun(mode=Mode.PARALLEL, command=("gpuci",), rootdir="/x", workers=2, tests=tests)
        parallel = ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)
        victim_fails = FakePairProber(lambda _, n: Outcome.FAILED)
        search = pairs(victim_fails, parallel, concurrency, kind=failure_kind(tests[1:]))
        assert search.culprits == ("test_x.py",) and search.partners == ()
        assert len(victim_fails.runs) == runs


@dataclass
class FakeSidedRun(FakeRun):
    """A pair run's interpreter with its tests' results (the partner's side)."""

    results: dict[str, TestResult] = field(default_factory=dict)


OUT_OF_MEMORY = "OutOfMemoryError: out of device memory allocating 410 MiB (PID 7: 410 MiB)"


@dataclass
class FakeContention(FakePairProber):
    """Whichever asks second fails: here always the partner, never the victim."""

    def answer(self, groups: Sequence[tuple[Sequence[str], str | None]]) -> list[FakeRun]:
        partner = TestResult(
            id="test_x.py::test_a", file="test_x.py", outcome=Outcome.FAILED, message=OUT_OF_MEMORY
        )
        return [
            FakeSidedRun(Outcome.PASSED),
            FakeSidedRun(Outcome.PASSED, results={partner.id: partner}),
        ]


def test_a_partner_failing_the_victims_way_shows_the_contention_and_is_named() -> None:
    tests = (
        TestResult(id="test_x.py::test_a", file="test_x.py", outcome=Outcome.PASSED),
        TestResult(id=VICTIM, file="test_v.py", outcome=Outcome.FAILED),
    )
    run = ModeRun(mode=Mode.PARALLEL, command=("gpuci",), rootdir="/x", workers=2, tests=tests)
    parallel = ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)
    concurrency = dataclasses.replace(task(Category.CONCURRENCY), candidates=("test_x.py",))
    kind = "OutOfMemoryError: out of device memory allocating N MiB"
    search = pairs(FakeContention(lambda _, n: Outcome.PASSED), parallel, concurrency, kind)
    assert search.culprits == ("test_x.py",) and search.partners == ("test_x.py::test_a",)
    assert len(search.probes) == 2  # the pair, confirmed: no more runs to find its partner
    # counting only the victim's own outcome, the same runs showed nothing
    blind = pairs(FakeContention(lambda _, n: Outcome.PASSED), parallel, concurrency)
    assert blind.culprits == () and blind.note.startswith("not reproduced")


SCRATCH = "AssertionError: another interpreter holds /tmp/scratch.lock"


@dataclass
class FakeTakingTurns(FakePairProber):
    """Two files that take one scratch file for their whole run: beside test_x.py, whichever
    side asks second fails, the victim in one run and test_x.py's test in the next;
    test_x.py's test fails without the victim too where `own` says so."""

    own: bool = False

    def answer(self, groups: Sequence[tuple[Sequence[str], str | None]]) -> list[FakeRun]:
        partner = "test_x.py::test_a"
        ids = [i for ids, _ in groups for i in ids]
        if VICTIM not in ids:  # the partner's side without the victim
            outcome = Outcome.FAILED if self.own else Outcome.PASSED
            side = TestResult(id=partner, file="test_x.py", outcome=outcome, message=SCRATCH)
            return [FakeSidedRun(outcome, results={partner: side})]
        if partner not in ids:  # beside test_y.py: nothing contends
            return [FakeSidedRun(Outcome.PASSED), FakeSidedRun(Outcome.PASSED)]
        victim_first = len(self.runs) % 2 == 0  # it asks second, and fails, every other run
        lost = TestResult(
            id=partner,
            file="test_x.py",
            outcome=Outcome.PASSED if victim_first else Outcome.FAILED,
            message="" if victim_first else SCRATCH,
        )
        return [
            FakeSidedRun(Outcome.FAILED if victim_first else Outcome.PASSED),
            FakeSidedRun(Outcome.PASSED, results={partner: lost}),
        ]


@pytest.mark.parametrize(
    ("passed_alone", "own", "runs", "culprits"),
    [
        # its own file passed alone in the isolated screen: the pair's two runs say it
        ({"test_x.py::test_a"}, False, 2, ("test_x.py",)),
        # not known: the partner's side runs once without the victim, and passes
        (set(), False, 3, ("test_x.py",)),
        # the partner fails without the victim too: its failure shows nothing, and the victim
        # failed beside test_x.py once: no pair stands
        (set(), True, 3 + 2 + 2, ()),
    ],
)
def test_a_contention_that_fails_each_side_in_turn_names_its_one_partner_file(
    passed_alone: set[str], own: bool, runs: int, culprits: tuple[str, ...]
) -> None:
    # boltons' planted scratch file: beside test_ioutils.py the victim passed while the
    # partner's test failed its way, then the victim failed; counting the victim's failures
    # alone that pair showed nothing, every other file alone showed nothing, and all seven
    # together failed twice: seven files named, six of them innocent
    tests = (
        TestResult(id="test_x.py::test_a", file="test_x.py", outcome=Outcome.PASSED),
        TestResult(id="test_y.py::test_a", file="test_y.py", outcome=Outcome.PASSED),
        TestResult(id=VICTIM, file="test_v.py", outcome=Outcome.FAILED, message=SCRATCH),
    )
    run = ModeRun(mode=Mode.PARALLEL, command=("gpuci",), rootdir="/x", workers=2, tests=tests)
    parallel = ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)
    contention = dataclasses.replace(
        task(Category.CONCURRENCY), candidates=("test_x.py", "test_y.py")
    )
    prober = FakeTakingTurns(lambda _, n: Outcome.PASSED, own=own)
    search = search_pairs(
        prober,  # type: ignore[arg-type]
        parallel,
        victim=VICTIM,
        candidates=contention.candidates,
        kind=failure_kind(tests[2:]),
        partnerable={"test_x.py::test_a"},
        passed_alone=passed_alone,
    )
    assert search.culprits == culprits and search.partners == ()
    assert len(prober.runs) == runs
    if culprits:
        assert "confirmed twice" in search.note and "only all" not in search.note
        # the engine's gate reads the same runs: with test_x.py it failed (one side or
        # the other), twice; alone it passed
        evidence = TestEvidence(
            id=VICTIM,
            alone=(Outcome.PASSED, Outcome.PASSED),
            culprits=search.culprits,
            search=search.note,
            probes=tuple(search.probes),
        )
        assert standing(PairSearches(), evidence) is Standing.STANDS


@dataclass
class FakeHogs(FakePairProber):
    """Two hogs that cannot both fit: in every pair run both fail the same way."""

    def answer(self, groups: Sequence[tuple[Sequence[str], str | None]]) -> list[FakeRun]:
        return [
            FakeSidedRun(Outcome.FAILED, results={i: _oom(i)}) for ids, _ in groups for i in ids
        ]


def _oom(test_id: str) -> TestResult:
    return TestResult(id=test_id, file=file_of(test_id), outcome=Outcome.FAILED, message=OOM)


OOM = "OutOfMemoryError: out of device memory allocating 52 GiB"


HOG_A, HOG_B = "test_hog_a.py::test_hold", "test_hog_b.py::test_hold"


def _two_hogs(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Context, FakeHogs, dict[str, Classified]]:
    """gpu_polluted's two 52 GiB hogs, each the other's concurrency victim: each one's pair
    runs the same two files, and both fail in every run."""
    hog_a, hog_b = HOG_A, HOG_B

    def hog(victim: str, other: str) -> _Task:
        return _Task(
            victim=victim,
            category=Category.CONCURRENCY,
            candidates=(other.partition("::")[0],),
            rank=(0, 0),
            kind="OutOfMemoryError: out of device memory allocating N GiB",
        )

    tests = (_oom(hog_a), _oom(hog_b))
    run = ModeRun(mode=Mode.PARALLEL, command=("gpuci",), rootdir="/x", workers=2, tests=tests)
    parallel = ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)
    classified = {
        i: Classified(
            id=i,
            category=Category.CONCURRENCY,
            outcomes={Mode.PARALLEL: Outcome.FAILED},
            reruns=(Outcome.PASSED,),
            # each passed in its own file alone: a partner's claim needs no run without it
            results={
                Mode.PARALLEL: t,
                Mode.ISOLATED: dataclasses.replace(t, outcome=Outcome.PASSED),
            },
        )
        for i, t in zip((hog_a, hog_b), tests, strict=True)
    }
    monkeypatch.setattr(
        gpuci.evidence.kinds.pairs,
        "plan_searches",
        lambda *_, **__: [hog(hog_a, hog_b), hog(hog_b, hog_a)],
    )
    prober = FakeHogs(lambda _, n: Outcome.FAILED, admission=Admission(slots=4))
    ctx = Context(
        prober=prober,  # type: ignore[arg-type]
        results={Mode.PARALLEL: parallel},
        orders={},
        progress=io.StringIO(),
        ledger=Ledger(),
    )
    return ctx, prober, classified


def test_a_hog_shown_as_the_other_hogs_partner_is_not_searched_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hog_a, hog_b = HOG_A, HOG_B
    ctx, prober, classified = _two_hogs(monkeypatch)
    found = gpuci.evidence.kinds.pairs.search_pairs_of(ctx, classified, {})
    assert found[hog_a].culprits == ("test_hog_b.py",)
    assert found[hog_b].culprits == (hog_a,)
    assert found[hog_b].search.startswith("pair: the partner of")
    assert len(prober.runs) == 2  # hog_a's pair and its confirmation; none of hog_b's own
    # and its claim stands before any alone-run of its own (on one GPU the hogs wait for a
    # later round's): its file's isolated run, which the search took for its run without
    # hog_a, is that half; refused, it was searched all over again in the next round
    assert not found[hog_b].alone
    assert standing(PairSearches(), found[hog_b]) is Standing.STANDS


def test_a_victim_another_kind_searched_this_round_is_not_paired_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # hog_a was shown this round by the culprit search's pair runs (as an order-dependent
    # victim's partner): the pairs kind asks its question no more, and hog_b's pair, which
    # shows hog_a failing its way again, does not rename it
    ctx, prober, classified = _two_hogs(monkeypatch)
    searched = {HOG_A}
    found = gpuci.evidence.kinds.pairs.search_pairs_of(ctx, classified, {}, searched=searched)
    assert HOG_A not in found and found[HOG_B].culprits == ("test_hog_a.py",)
    assert len(prober.runs) == 2  # hog_b's pair and its confirmation only
    assert searched == {HOG_A, HOG_B}


def test_an_out_of_memory_victim_is_paired_with_the_file_that_held_most_first() -> None:
    from gpuci.evidence.pairs import pair_order

    # the parallel screen's overlap put the small files first; the hog beside it held 52 GiB
    overlap = ["test_flaky.py", "test_cache.py", "test_blas.py", "test_hog_b.py"]
    peaks = {"test_hog_b.py": 53222, "test_blas.py": 600, "test_cache.py": 520}
    oom = "AssertionError: workspace allocation failed: Out of memory allocating N bytes"
    assert pair_order(overlap, oom, peaks) == [
        "test_hog_b.py",
        "test_blas.py",
        "test_cache.py",
        "test_flaky.py",
    ]
    # any other failure keeps the longest overlap first
    assert pair_order(overlap, "AssertionError: assert N == N", peaks) == overlap


def test_out_of_memory_with_nothing_held_before_it_is_paired_before_any_replay() -> None:
    # gpu_polluted's hog failed out of memory in the parallel screen beside the other hog:
    # the replay of its interpreter (4 strict 52 GiB runs on the H100) showed nothing
    tests = (
        TestResult(id="test_x.py::test_a", file="test_x.py", outcome=Outcome.PASSED),
        TestResult(id=VICTIM, file="test_v.py", outcome=Outcome.FAILED),
    )
    run = ModeRun(mode=Mode.PARALLEL, command=("gpuci",), rootdir="/x", workers=2, tests=tests)
    parallel = ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)
    hog = dataclasses.replace(
        task(Category.ORDER_DEPENDENT),
        pairs=("test_x.py",),
        kind="OutOfMemoryError: out of device memory allocating N GiB",
        loadable=True,  # it failed in the parallel screen, after its own file's tests only
        device_oom=True,  # no pool limit in its messages
    )
    beside = FakePairProber(lambda _, n: Outcome.FAILED)
    search = _replay(beside, parallel, hog, [], NO_PARTNERS)  # type: ignore[arg-type]
    assert search.culprits == ("test_x.py",)
    # only pair runs: the pair and its confirmation (test_x.py passed in the screen: no
    # tries to see a partner test fail its way)
    assert beside.runs == [[VICTIM, "test_x.py::test_a"]] * 2
    # where the ledger points at an earlier test of its own file (memory it left held: the
    # parallel interpreter ran it before the victim too), the replay first
    own = "test_v.py::test_earlier"
    hinted = dataclasses.replace(hog, candidates=(*CANDIDATES, own), hinted=(own,), hint="ledger")
    after = FakePairProber(lambda ids, _: Outcome.FAILED if own in ids else Outcome.PASSED)
    search = _replay(after, parallel, hinted, [], NO_PARTNERS)  # type: ignore[arg-type]
    assert search.culprits == (own,) and after.runs[0] == [own, VICTIM]
    # a hint at another file's test (one the suite interpreter ran before it) cannot explain
    # its failure in the parallel screen: its pairs still come first (gpu_polluted's hog on
    # one H200: the ledger pointed at two small tests of other files, and a 4-run bisection
    # of 91 GiB runs showed nothing before the pair did)
    elsewhere = dataclasses.replace(hog, hinted=(CANDIDATES[4],), hint="ledger")
    paired = FakePairProber(lambda _, n: Outcome.FAILED)
    search = _replay(paired, parallel, elsewhere, [], NO_PARTNERS)  # type: ignore[arg-type]
    assert search.culprits == ("test_x.py",)
    assert paired.runs == [[VICTIM, "test_x.py::test_a"]] * 2
    # and where no pair shows it, the hint is the replay's first try
    after_pairs = FakePairProber(
        lambda ids, _: Outcome.FAILED if CANDIDATES[4] in ids else Outcome.PASSED
    )
    search = _replay(after_pairs, parallel, elsewhere, [], NO_PARTNERS)  # type: ignore[arg-type]
    assert search.culprits == (CANDIDATES[4],)
    assert [CANDIDATES[4], VICTIM] in after_pairs.runs
    # no pair shows it: the replay still runs, its note saying the pairs came first
    alone_passes = FakePairProber(
        lambda ids, _: Outcome.FAILED if CANDIDATES[2] in ids else Outcome.PASSED
    )
    replayed = _replay(alone_passes, parallel, hog, [], NO_PARTNERS)  # type: ignore[arg-type]
    assert replayed.culprits == (CANDIDATES[2],)
    assert "; first not reproduced" in replayed.note
    # failed out of memory in the suite interpreter only (examples/polluted_suite's large
    # batch after a pool limit the ledger cannot see): its replay first, as for any other
    in_suite = dataclasses.replace(hog, loadable=False)
    # (a pair would show it too: beside the hog it runs out of memory as well)
    after_limit = FakePairProber(
        lambda ids, _: Outcome.FAILED if CANDIDATES[2] in ids or not ids else Outcome.PASSED
    )
    search = _replay(after_limit, parallel, in_suite, [], NO_PARTNERS)  # type: ignore[arg-type]
    assert search.culprits == (CANDIDATES[2],)
    assert after_limit.runs[0][-1] == VICTIM and "test_x.py::test_a" not in after_limit.runs[0]


def test_a_victim_that_only_ran_the_device_out_of_memory_is_not_poisoned() -> None:
    # examples/gpu_polluted's hog failed in the suite beside nothing but its earlier tests'
    # leftovers: its poisoned run needed the whole H100 for 7 s and could tell nothing
    hog, reader, both = "test_hog.py::test_big", "test_r.py::test_reads", "test_m.py::test_mixed"
    oom = "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 21,474,836,480 bytes"
    tests = (
        TestResult(id=hog, file="test_hog.py", outcome=Outcome.FAILED, message=oom),
        TestResult(id=reader, file="test_r.py", outcome=Outcome.FAILED, message="assert 255 == 0"),
        TestResult(id=both, file="test_m.py", outcome=Outcome.FAILED, message=oom),
    )
    suite = ModeRun(mode=Mode.SUITE, command=("gpuci",), rootdir="/x", workers=1, tests=tests)
    mixed = (
        TestResult(id=both, file="test_m.py", outcome=Outcome.CRASHED, message="KeyError: 'x'"),
    )
    parallel = ModeRun(mode=Mode.PARALLEL, command=("gpuci",), rootdir="/x", workers=2, tests=mixed)
    results = {
        run.mode: ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)
        for run in (suite, parallel)
    }
    assert worth_poisoning(results, [hog, reader, both]) == [reader, both]


def test_first_pairs_start_ahead_once_per_pair_of_files_and_twice_per_search() -> None:
    from gpuci.evidence.pairs import first_pair_requests

    # gpu_polluted: the two hogs pair with each other (one search answers both), and the
    # flaky test pairs with hog_a's file, which so needs its interpreters twice over
    hog_a, hog_b, flaky = "test_hog_a.py::test_hold", "test_hog_b.py::test_hold", VICTIM
    tests = (
        _oom(hog_a),
        _oom(hog_b),
        TestResult(id=flaky, file="test_v.py", outcome=Outcome.FAILED),
    )
    run = ModeRun(mode=Mode.PARALLEL, command=("gpuci",), rootdir="/x", workers=2, tests=tests)
    parallel = ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)
    requests = first_pair_requests(
        parallel,
        [
            (hog_a, ["test_hog_b.py"], OOM),
            (hog_b, ["test_hog_a.py"], OOM),
            (flaky, ["test_hog_a.py", "test_hog_b.py"], ""),
        ],
    )
    assert all(r.side for r in requests)  # each a side of a pair run
    assert [(list(r.ids), r.copies) for r in requests] == [
        ([hog_a], 2),
        ([hog_b], 2),
        ([flaky], 2),
        ([hog_a], 4),  # hog_a's file: the hogs' pair's two runs and the flaky test's two
    ]


def test_a_waiting_victim_another_search_answered_goes_round_no_more() -> None:
    from gpuci.evidence.kinds.groups import next_round

    # the second hog waited for the first's culprits (both failed in one interpreter), and
    # the first's pair named it as its partner: it needs no search of its own
    hog_a, other = "test_hog_a.py::test_hold", "test_x.py::test_later"
    found = {
        hog_a: TestEvidence(id=hog_a, culprits=("test_hog_b.py::test_hold",)),
        other: TestEvidence(id=other),
    }
    assert next_round([hog_a, other], {hog_a: 2, other: 2}, found) == {other: 2}


@dataclass
class FakeApart(FakePairProber):
    """Pair runs whose sides reach their first tests together only from run `meets_from`
    on (a loaded machine's start-up held one back); the victim, alone, passes until then."""

    meets_from: int = 99

    def run_together(
        self,
        groups: Sequence[tuple[Sequence[str], str | None]],
        *,
        phase: str,
        label: str,
    ) -> tuple[list[FakeRun], int]:
        runs, _ = super().run_together(groups, phase=phase, label=label)
        met = len(groups) if len(self.runs) >= self.meets_from else 1
        return runs, met


def test_a_pair_run_whose_sides_never_met_asked_nothing() -> None:
    # the polluted example's hog pair on 2 loaded cores: the pair runs never overlapped, and
    # the check called each hog passed "in 2 strict runs", its alone-runs
    tests = (
        TestResult(id="test_x.py::test_a", file="test_x.py", outcome=Outcome.PASSED),
        TestResult(id=VICTIM, file="test_v.py", outcome=Outcome.FAILED),
    )
    run = ModeRun(
        mode=Mode.PARALLEL,
        command=("gpuci",),
        rootdir="/x",
        workers=2,
        tests=tests,
        beside=(Mode.SUITE,),
    )
    parallel = ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)
    concurrency = dataclasses.replace(task(Category.CONCURRENCY), candidates=("test_x.py",))

    def fails_when_met(prober: FakeApart) -> Outcome:
        return Outcome.FAILED if len(prober.runs) >= prober.meets_from else Outcome.PASSED

    # the first run apart asked nothing: it runs again, as it was, and then shows it
    late = FakeApart(lambda _, n: Outcome.NOT_RUN, meets_from=2)
    late.victim = lambda _, n: fails_when_met(late)
    search = pairs(late, parallel, concurrency)
    assert search.culprits == ("test_x.py",), search.note
    assert [p.kind for p in search.probes] == [UNASKED, "", ""]
    # never met: the screen's question was never asked, so the screen's finding stands
    never = FakeApart(lambda _, n: Outcome.PASSED)
    search = pairs(never, parallel, concurrency)
    assert search.culprits == () and "2 did not overlap" in search.note
    assert all(p.kind == UNASKED for p in search.probes)
    suspect = Classified(
        id=VICTIM,
        category=Category.CONCURRENCY,
        outcomes={Mode.SUITE: Outcome.PASSED, Mode.PARALLEL: Outcome.FAILED},
        reruns=(Outcome.PASSED, Outcome.PASSED),
        results={Mode.PARALLEL: tests[1]},
    )
    evidence = TestEvidence(id=VICTIM, search=search.note, probes=tuple(search.probes))
    found = confirm_strictly(suspect, evidence, {Mode.PARALLEL: parallel})
    assert found.category is Category.CONCURRENCY and not found.note


def test_out_of_memory_under_a_pool_limit_is_the_process_own_state() -> None:
    from gpuci.evidence.victims import ran_device_out

    def failed(message: str) -> TestResult:
        return TestResult(id=VICTIM, file="test_v.py", outcome=Outcome.FAILED, message=message)

    limit = (
        "OutOfMemoryError: Out of memory allocating 134,217,728 bytes"
        " (allocated so far: 0 bytes, limit set to: 64 MiB)"
    )
    device = (
        "OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes (allocated so far: 0 bytes)"
    )
    # its failure kind ends before the particulars: the limit is not in it
    assert "limit" not in failure_kind([failed(limit)])
    assert ran_device_out([failed(device)])
    assert not ran_device_out([failed(limit)])
    assert not ran_device_out([failed(device), failed(limit)])  # one of them was the limit
    assert not ran_device_out([failed("AssertionError: 3 != 4")])
