"""Evidence runs side by side: the admission of runs to the check's slots, and the searches
that share them (a pass answers under load; a failure decides only with nothing beside it)."""

from __future__ import annotations

import dataclasses
import io
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import pytest

import gpuci.evidence.kinds.poisoned_runs
from gpuci.evidence.admission import Admission
from gpuci.evidence.alone import first_alone, more_alone, prioritize, run_alone
from gpuci.evidence.classify import Classified
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.culprit_search.culprits import _replay
from gpuci.evidence.kinds.poisoned_runs import run_poisoned
from gpuci.evidence.likely import withdraw_unlikely
from gpuci.evidence.notes import NOT_REPRODUCED, SAME_RUN_BOTH_WAYS
from gpuci.evidence.orders import interpreter_order
from gpuci.evidence.requests import Request
from gpuci.evidence.results import ModeResults
from gpuci.evidence.search.bisect import REFUTED, bisect
from gpuci.evidence.search.schedule import _by_interpreter, _search_once, _waves
from gpuci.evidence.search.step import Search
from gpuci.evidence.victims import Task, plan_searches
from gpuci.model import Category, Mode, ModeRun, Outcome, TestEvidence, TestResult
from gpuci.state.left import Ledger

VICTIM = "test_v.py::test_victim"
CANDIDATES = tuple(f"test_{i:02d}.py::test_c" for i in range(16))


def test_runs_share_the_slots_and_a_strict_one_has_nothing_beside_it() -> None:
    admission = Admission(slots=2)
    timeline: list[tuple[str, str, int]] = []  # (run, "in" or "out", running then)
    lock = threading.Lock()

    def run(name: str, *, strict: bool, hold: float) -> None:
        with admission.admitted(strict=strict):
            with lock:
                timeline.append((name, "in", admission.running()))
            time.sleep(hold)
            with lock:
                timeline.append((name, "out", admission.running()))

    threads = [
        threading.Thread(target=run, args=("a",), kwargs={"strict": False, "hold": 0.3}),
        threading.Thread(target=run, args=("b",), kwargs={"strict": False, "hold": 0.3}),
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.1)  # a and b run; the strict run waits for both, and c waits behind it
    strict = threading.Thread(target=run, args=("s",), kwargs={"strict": True, "hold": 0.2})
    strict.start()
    time.sleep(0.05)
    late = threading.Thread(target=run, args=("c",), kwargs={"strict": False, "hold": 0.1})
    late.start()
    for thread in [*threads, strict, late]:
        thread.join()
    order = [(name, what) for name, what, _ in timeline]
    s_in, s_out = order.index(("s", "in")), order.index(("s", "out"))
    assert order.index(("a", "out")) < s_in and order.index(("b", "out")) < s_in
    assert s_out < order.index(("c", "in")), timeline  # nothing started beside it
    assert max(n for _, _, n in timeline) == 2 and admission.most == 2
    assert ("s", "in", 1) in timeline  # alone
    assert admission.beside == 2  # a and b overlapped; s and c had nothing beside them


def test_a_strict_run_is_not_starved_by_a_stream_of_others() -> None:
    admission = Admission(slots=1)
    first = threading.Event()
    done: list[str] = []

    def others() -> None:
        for _ in range(20):
            with admission.admitted(strict=False):
                first.set()
                time.sleep(0.01)
            done.append("other")

    stream = threading.Thread(target=others)
    stream.start()
    first.wait()
    with admission.admitted(strict=True):
        done.append("strict")
    stream.join()
    assert done.index("strict") < 5, done  # it waited for the run in flight, not the stream


@dataclass
class LoadedRun:
    result: Outcome
    beside: bool
    pending: object = None  # a speculated run, until settled
    killed: bool = False

    def outcome(self, test_id: str) -> Outcome:
        return self.result


@dataclass
class LoadedProber:
    """Runs that are not strict have others beside them; `victim(ids, strict)` is the
    victim's outcome."""

    victim: Callable[[Sequence[str], bool], Outcome]
    admission: Admission = field(default_factory=lambda: Admission(slots=4))
    runs: list[tuple[list[str], bool]] = field(default_factory=list)
    losers: list[LoadedRun] = field(default_factory=list)  # speculated runs not used
    expensive: bool = False  # its start-ups are cheap: nothing is held ahead
    hides_start_ups: bool = False  # nor prepared
    notes: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def exhausted(self) -> bool:
        return len(self.runs) > 200

    def stopping(self) -> bool:
        return False

    def left(self) -> float | None:
        return None

    def run(
        self,
        ids: Sequence[str],
        *,
        phase: str,
        label: str,
        strict: bool = False,
        env: object = None,
        collect: Sequence[str] = (),
        cancel: object = None,
        handed: object = None,
    ) -> LoadedRun:
        with self._lock:
            self.runs.append((list(ids), strict))
        return LoadedRun(self.victim(ids, strict), beside=not strict, pending=cancel)

    def settle(self, ran: LoadedRun, *, used: bool) -> None:
        if not used:
            self.losers.append(ran)

    prepared: list[tuple[list[str], bool]] = field(default_factory=list)  # started ahead

    def start_ahead(self, requests: Iterable[Request]) -> None:
        with self._lock:
            self.prepared += [(list(r.ids), r.strict) for r in requests]

    withdrawn: list[list[str]] = field(default_factory=list)  # started ahead, given back

    def withdraw(self, ids: Sequence[str], **_: object) -> None:
        with self._lock:
            self.withdrawn.append(list(ids))


def task(category: Category = Category.ORDER_DEPENDENT) -> Task:
    return Task(victim=VICTIM, category=category, candidates=CANDIDATES, rank=(0, 0))


def test_levels_run_in_waves_and_the_confirmation_of_a_failure_is_strict() -> None:
    culprit = CANDIDATES[13]
    prober = LoadedProber(lambda ids, _: Outcome.FAILED if culprit in ids else Outcome.PASSED)
    search = bisect(prober, task())  # type: ignore[arg-type]
    assert search.culprits == (culprit,)
    # four slots: a wave of four runs decides two levels (first halves of 16, then of 8:
    # 13 is in neither), the next three levels and the run of the last candidate; the
    # runs off the path are losers, never counted; the confirmation had nothing beside it
    assert [len(ids) - 1 for ids, _ in prober.runs[:4]] == [8, 4, 4, 2]
    assert search.steps is not None
    assert (search.steps.runs, search.steps.waves, search.steps.losers) == (6, 3, 3)
    assert len(prober.runs) - len(prober.losers) == search.steps.runs == len(search.probes)
    assert search.steps.runs <= search.steps.bound
    assert prober.runs[-1] == ([culprit, VICTIM], True)
    assert not any(strict for _, strict in prober.runs[:-1])


def test_a_finding_that_needs_tests_of_two_parts_refutes_the_halving_and_is_checked() -> None:
    # it fails only after both: the inferred halves lose one of them, the run of the last
    # candidate refutes it, and the checked halving keeps the first half, where no quarter
    # and no half of it alone shows it
    needed = {CANDIDATES[1], CANDIDATES[5]}
    prober = LoadedProber(lambda ids, _: Outcome.FAILED if needed <= set(ids) else Outcome.PASSED)
    search = bisect(prober, task())  # type: ignore[arg-type]
    assert search.culprits == CANDIDATES[:8] and "needs all 8 together" in search.note
    assert REFUTED in search.note
    assert search.steps is not None and search.steps.runs > search.steps.bound


def test_a_providers_pass_answers_under_load() -> None:
    provider = CANDIDATES[2]
    prober = LoadedProber(lambda ids, _: Outcome.PASSED if provider in ids else Outcome.FAILED)
    search = bisect(prober, task(Category.DEPENDS_ON_OTHERS))  # type: ignore[arg-type]
    assert search.culprits == (provider,)
    assert not any(strict for _, strict in prober.runs)  # a pass needs no strict run


def _ctx(prober: object, progress: io.StringIO) -> Context:
    """A search's context: the fake runner, no screens' results, progress told to `progress`."""
    return Context(
        prober=prober,  # type: ignore[arg-type]
        results={},
        orders={},
        progress=progress,
        ledger=Ledger(),
    )


def _replayed_once(prober: object, progress: io.StringIO, task: Task) -> Search:
    """An order-dependent victim's search (its replay) once, redone strictly where a strict
    run contradicted it."""

    def replay(task: Task, roots: list[tuple[str, ...]]) -> Search:
        return _replay(prober, None, task, roots, frozenset())  # type: ignore[arg-type]

    return _search_once(_ctx(prober, progress), task, [], replay, "culprits")


def test_a_victim_failing_by_the_load_in_every_wave_is_searched_again_strictly() -> None:
    # it fails whenever another run is beside it, and after its culprit: the waves keep
    # first halves down to the first candidate, the strict confirmation contradicts them,
    # and the search runs again with nothing beside it
    culprit = CANDIDATES[5]
    prober = LoadedProber(
        lambda ids, strict: Outcome.FAILED if culprit in ids or not strict else Outcome.PASSED
    )
    out = io.StringIO()
    search = _replayed_once(prober, out, task())
    assert search.culprits == (culprit,) and "again, strictly" in out.getvalue()
    assert prober.runs[-1] == ([culprit, VICTIM], True)
    # one that failed beside others in the parallel screen runs one level at a time
    prober.runs.clear()
    prober.losers.clear()
    loadable = dataclasses.replace(task(), loadable=True)
    search = _replayed_once(prober, out, loadable)
    assert search.culprits == (culprit,)
    assert [len(ids) - 1 for ids, _ in prober.runs[:2]] == [8, 4]  # no speculation
    assert not prober.losers


def test_a_failure_beside_others_that_a_strict_run_contradicts_is_searched_again() -> None:
    # a decoy's file loads the victim when the two run at once (not in one interpreter):
    # the halves blame the decoy, the strict confirmation passes, and the search runs again
    # with nothing beside it: never reproduced, and not called flaky either
    decoy = CANDIDATES[12]
    prober = LoadedProber(
        lambda ids, strict: Outcome.FAILED if decoy in ids and not strict else Outcome.PASSED
    )
    out = io.StringIO()
    search = _replayed_once(prober, out, task())
    assert search.culprits == () and search.note.startswith(NOT_REPRODUCED), search.note
    assert SAME_RUN_BOTH_WAYS not in search.note
    assert "again, strictly" in out.getvalue()
    redo = prober.runs[prober.runs.index(([decoy, VICTIM], True)) + 1 :]
    assert redo and all(strict for _, strict in redo)


def test_a_flaky_victim_contradicting_its_loaded_search_is_flaky_not_searched_again() -> None:
    # it fails every other run: the steps beside others name a culprit by chance, the
    # strict confirmation passes, and a third, strict run fails again: one command, both ways
    count = iter(range(100))
    prober = LoadedProber(
        lambda *_: Outcome.FAILED if next(count) % 2 == 0 else Outcome.PASSED,
        admission=Admission(slots=1),  # one run at a time: the alternation is in order
    )
    out = io.StringIO()
    search = _replayed_once(prober, out, task())
    assert search.culprits == () and SAME_RUN_BOTH_WAYS in search.note, search.note
    assert "then again" in search.note and not search.contradicted
    assert "again, strictly" not in out.getvalue()  # no redo
    assert [strict for _, strict in prober.runs[-2:]] == [True, True]
    assert len(prober.runs) <= 2 * 4 + 2


def test_a_providers_confirmation_failing_beside_others_holds_where_a_strict_run_passes() -> None:
    provider = CANDIDATES[9]
    # its run in the last wave passes, its confirmation fails by the load, then alone passes
    loaded = iter([Outcome.PASSED, Outcome.FAILED])

    def victim(ids: Sequence[str], strict: bool) -> Outcome:
        if ids == [provider, VICTIM] and not strict:
            return next(loaded)
        return Outcome.PASSED if provider in ids else Outcome.FAILED

    prober = LoadedProber(victim)
    search = bisect(prober, task(Category.DEPENDS_ON_OTHERS))  # type: ignore[arg-type]
    assert search.culprits == (provider,), search.note
    assert prober.runs[-1] == ([provider, VICTIM], True)


def test_a_test_that_failed_alone_runs_its_next_alone_run_strictly() -> None:
    broken, fine = "test_b.py::test_broken", "test_f.py::test_fine"
    prober = LoadedProber(lambda ids, _: Outcome.FAILED if broken in ids else Outcome.PASSED)
    found = run_alone(_ctx(prober, io.StringIO()), {broken: 2, fine: 2})
    assert found[broken].alone == (Outcome.FAILED, Outcome.FAILED)
    assert found[fine].alone == (Outcome.PASSED, Outcome.PASSED)
    # its first beside the other, confirmed strictly; its second strict from the start
    assert [strict for ids, strict in prober.runs if ids == [broken]] == [False, True, True]
    # the confirmation's interpreter started as soon as the failure beside others was seen
    assert prober.prepared == [([broken], True)]
    earlier = {broken: TestEvidence(id=broken, alone=(Outcome.FAILED,))}
    prober.runs.clear()
    more_alone(_ctx(prober, io.StringIO()), {broken: 1}, earlier)
    assert prober.runs == [([broken], True)]


def test_two_runs_that_do_not_fit_the_gpu_together_run_one_after_the_other() -> None:
    # the screens saw each hog's file peak at 52 GiB of an 80 GiB GPU
    admission = Admission(
        slots=4, capacity_mib=81559, peaks={"test_hog_a.py": 53248, "test_hog_b.py": 53248}
    )
    spans: dict[str, tuple[float, float]] = {}

    def run(file: str) -> None:
        with admission.admitted(strict=False, need_mib=admission.need([file])):
            start = time.monotonic()
            time.sleep(0.2)
            spans[file] = (start, time.monotonic())

    threads = [
        threading.Thread(target=run, args=(f,))
        for f in ("test_hog_a.py", "test_hog_b.py", "test_small.py")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (a0, a1), (b0, b1) = spans["test_hog_a.py"], spans["test_hog_b.py"]
    assert a1 <= b0 or b1 <= a0, spans  # never together
    assert admission.most == 2  # a file of unknown peak went beside one of them


def test_a_poisoned_failure_beside_others_is_weighed_by_strict_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gpuci.evidence.kinds.poisoned_runs, "poisonable", lambda prober: True)
    # it fails whenever another run is beside it: the load's, not a flaky test's
    loaded = LoadedProber(lambda _, strict: Outcome.PASSED if strict else Outcome.FAILED)
    found = run_poisoned(_ctx(loaded, io.StringIO()), [VICTIM], {})
    assert found[VICTIM].poisoned is Outcome.PASSED and not found[VICTIM].search
    assert [strict for _, strict in loaded.runs] == [False, True, True]
    # it fails every other run, whatever runs beside it: the strict runs disagree
    count = iter(range(100))
    flaky = LoadedProber(lambda *_: Outcome.FAILED if next(count) % 2 == 0 else Outcome.PASSED)
    found = run_poisoned(_ctx(flaky, io.StringIO()), [VICTIM], {})
    assert found[VICTIM].poisoned is None and SAME_RUN_BOTH_WAYS in found[VICTIM].search


def test_a_peak_learned_alone_is_kept_for_the_later_runs() -> None:
    # the screens saw the hog fail short of memory beside its partner: a small peak
    admission = Admission(slots=4, capacity_mib=81559, peaks={"test_hog_a.py": 600})
    small = admission.need(["test_hog_a.py"])
    admission.learn("test_hog_a.py", 53248)  # its alone-run held 52 GiB
    admission.learn("test_hog_a.py", None)  # a run not measured changes nothing
    assert admission.need(["test_hog_a.py"]) > 53248 > small


def test_a_file_that_ran_out_of_memory_in_a_screen_keeps_the_gpu_until_measured() -> None:
    # the screens saw each hog fail short of memory beside the other: small peaks
    admission = Admission(
        slots=4, capacity_mib=81559, peaks={"test_hog_a.py": 600, "test_hog_b.py": 700}
    )
    admission.ran_out(["test_hog_a.py", "test_hog_b.py"])
    hog, other = admission.need(["test_hog_a.py"]), admission.need(["test_small.py"])
    assert hog > 81559 and other == 0
    with admission.admitted(strict=False, need_mib=hog):
        assert admission._fits(1, admission.need(["test_hog_b.py"])) is None
        assert admission._fits(1, other) is None  # nothing beside it: it may need all of it
    admission.learn("test_hog_a.py", 53248)  # measured alone: the stand-in goes
    assert round(53248 * 1.0) <= admission.need(["test_hog_a.py"]) < 81559
    Admission(slots=4).ran_out(["test_hog_a.py"])  # no GPU memory known: nothing to keep


def test_victims_that_failed_alike_beside_each_other_are_not_searched_at_once() -> None:
    def victim(name: str, kind: str, beside: str) -> Task:
        return Task(
            victim=f"{name}.py::test_x",
            category=Category.ORDER_DEPENDENT,
            candidates=CANDIDATES,
            rank=(0, int(name[-1])),
            pairs=(f"{beside}.py",),
            kind=kind,
        )

    oom = "RuntimeError: out of device memory: held by N other process(es)"
    first, hog_a, hog_b = victim("v1", "", "x"), victim("h2", oom, "h3"), victim("h3", oom, "h2")
    other = victim("v4", "AssertionError: limit leaked, the pool", "h2")
    assert _waves([first, hog_a, hog_b, other], 4) == [[first], [hog_a], [hog_b, other]]
    groups = _by_interpreter(
        [dataclasses.replace(hog_a, candidates=("a.py::t",)), hog_b]  # two interpreters
    )
    assert len(groups) == 1  # one group: its waves keep them apart


@pytest.mark.parametrize(
    ("category", "suite", "loadable"),
    [
        (Category.ORDER_DEPENDENT, Outcome.FAILED, True),  # it may fail by the load
        (Category.DEPENDS_ON_OTHERS, Outcome.PASSED, False),  # it shows by passing
    ],
)
def test_only_a_victim_that_failed_beside_others_and_shows_by_failing_is_loadable(
    category: Category, suite: Outcome, loadable: bool
) -> None:
    def mode(which: Mode, victim: Outcome) -> ModeResults:
        tests = [
            TestResult(id="test_a.py::test_a", file="test_a.py", outcome=Outcome.PASSED),
            TestResult(id="test_b.py::test_b", file="test_b.py", outcome=Outcome.PASSED),
            TestResult(id=VICTIM, file="test_v.py", outcome=victim),
        ]
        beside = (Mode.PARALLEL,) if which is Mode.SUITE else (Mode.SUITE,)
        run = ModeRun(
            mode=which,
            command=("gpuci",),
            rootdir="/x",
            workers=2,
            tests=tuple(tests),
            beside=beside,
        )
        return ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)

    results = {
        Mode.SUITE: mode(Mode.SUITE, suite),
        Mode.PARALLEL: mode(Mode.PARALLEL, Outcome.FAILED),
    }
    orders = {m: interpreter_order(r) for m, r in results.items()}
    victim = Classified(
        id=VICTIM,
        category=category,
        outcomes={Mode.SUITE: suite, Mode.PARALLEL: Outcome.FAILED},
        reruns=(Outcome.PASSED,) if suite is Outcome.FAILED else (Outcome.FAILED,),
        results={m: r.run.tests[-1] for m, r in results.items()},
    )
    ctx = Context(
        prober=None,  # type: ignore[arg-type]
        results=results,
        orders=orders,
        progress=io.StringIO(),
        ledger=Ledger(),
    )
    (found,) = plan_searches(ctx, {VICTIM: victim}, {})
    assert found.loadable is loadable and found.candidates


def test_a_suspect_that_failed_in_its_own_files_interpreters_runs_alone_strictly_at_once() -> None:
    # it passed only in the suite interpreter (depends on others): its alone-run beside
    # others failed, needed a strict run to count, and the second alone-run came on top
    needs, polluted = "test_n.py::test_needs", "test_p.py::test_polluted"

    def mode(which: Mode, outcomes: dict[str, Outcome]) -> ModeResults:
        tests = tuple(
            TestResult(id=i, file=i.partition("::")[0], outcome=o) for i, o in outcomes.items()
        )
        run = ModeRun(mode=which, command=("gpuci",), rootdir="/x", workers=2, tests=tests)
        return ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)

    failed, passed = Outcome.FAILED, Outcome.PASSED
    results = {
        Mode.SUITE: mode(Mode.SUITE, {needs: passed, polluted: failed}),
        Mode.PARALLEL: mode(Mode.PARALLEL, {needs: failed, polluted: passed}),
    }
    plan = prioritize(results, {needs: 2, polluted: 2})
    assert plan.likely_failing == {needs}
    prober = LoadedProber(lambda ids, _: failed if needs in ids else passed)
    found, _ = first_alone(
        _ctx(prober, io.StringIO()), plan.isolation, {}, likely_failing=plan.likely_failing
    )
    assert found[needs].alone == (failed, failed)
    assert [strict for ids, strict in prober.runs if ids == [needs]] == [True, True]
    assert [strict for ids, strict in prober.runs if ids == [polluted]] == [False]


def test_runs_beside_others_spread_over_the_gpus_by_memory_kept() -> None:
    # two GPUs of 80 GiB: a 50 GiB run on each, where one GPU could not hold both
    admission = Admission(slots=4, capacity_mib=81920, devices=2)
    with (
        admission.admitted(strict=False, need_mib=51200) as first,
        admission.admitted(strict=False, need_mib=51200) as second,
    ):
        assert (first.device, second.device) == (0, 1)
        assert admission._fits(1, 51200) is None  # neither GPU holds a third
        assert admission._fits(1, 20480) == 0  # a small one fits beside the first
    # a strict run sees the GPUs as the serial interpreters do: from the first
    with admission.admitted(strict=True) as strict:
        assert strict.device == 0
    # one GPU: every run starts on it
    single = Admission(slots=2, capacity_mib=81920)
    with single.admitted(strict=False, need_mib=100) as a, single.admitted(strict=False) as b:
        assert (a.device, b.device) == (0, 0)


def test_a_likely_failing_suspect_that_passes_alone_gives_back_its_second_interpreter() -> None:
    # it failed after its own file's earlier tests in every interpreter of its file, and
    # passes alone: the interpreter started ahead for a second strict run at once goes
    # (its second alone-run comes with the others', at the end)
    victim, other = "test_o.py::test_order", "test_q.py::test_fine"

    def mode(which: Mode, outcome: Outcome) -> ModeResults:
        tests = (TestResult(id=victim, file="test_o.py", outcome=outcome),)
        run = ModeRun(mode=which, command=("gpuci",), rootdir="/x", workers=2, tests=tests)
        return ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)

    results = {
        Mode.SUITE: mode(Mode.SUITE, Outcome.PASSED),
        Mode.PARALLEL: mode(Mode.PARALLEL, Outcome.FAILED),
    }
    plan = prioritize(results, {victim: 2, other: 2})
    assert plan.likely_failing == {victim}
    prober = LoadedProber(lambda ids, _: Outcome.PASSED)
    found, had = first_alone(
        _ctx(prober, io.StringIO()),
        plan.isolation,
        {},
        likely_failing=plan.likely_failing,
        passed_likely=lambda test_id: withdraw_unlikely(prober, test_id),  # type: ignore[arg-type]
    )
    assert found[victim].alone == (Outcome.PASSED,) and had[victim] == 1
    assert prober.withdrawn == [[victim]]  # the likely failing one's; the other had none
