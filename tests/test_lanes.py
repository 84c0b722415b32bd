"""Strict evidence runs on several GPUs: a file that held memory on one GPU only in the
screens has its strict runs on a GPU of its own while other files' strict runs use theirs;
every strict run of a file sees one view, and the commands printed for it carry that view."""

from __future__ import annotations

import threading
from pathlib import Path

from gpuci.evidence.admission import Admission
from gpuci.evidence.kinds.engine import with_lane_views
from gpuci.evidence.orders import interpreter_order
from gpuci.evidence.reproduce import finding_commands
from gpuci.evidence.results import ModeResults
from gpuci.evidence_file import evidence_to_json, read_evidence
from gpuci.formats import write_json_atomic
from gpuci.model import (
    Category,
    Evidence,
    FileRun,
    FileStatus,
    Interpreter,
    Mode,
    ModeRun,
    Outcome,
    TestEvidence,
    TestResult,
)

A, B, WIDE = "test_a.py", "test_b.py", "test_wide.py"


def lanes(devices: int = 2) -> Admission:
    return Admission(slots=8, capacity_mib=81920, devices=devices, narrow={A, B})


def test_strict_runs_of_two_narrow_files_keep_a_gpu_each_at_once() -> None:
    admission = lanes()
    with (
        admission.admitted(strict=True, files=[A], key=A) as a,
        admission.admitted(strict=True, files=[B], key=B) as b,
    ):
        # each alone on its GPU: neither counts as beside the other
        assert (a.device, b.device, a.lane, b.lane) == (0, 1, True, True)
        assert not a.beside and not b.beside
        assert admission._fits(1, 0, narrow=True) is None  # both GPUs kept
        assert admission._fits(1, 0) is None  # a run that may reach every GPU waits
        assert not admission._lane_free(0) and not admission._lane_free(1)
    assert admission.lanes == {A: 0, B: 1}
    # a later strict run of B keeps B's GPU, though GPU 0 is as free; one of files that may
    # reach every GPU has them all, and still sees B's view
    with admission.admitted(strict=True, files=[B], key=B) as again:
        assert again.device == 1
    with admission.admitted(strict=True, files=[WIDE, B], key=B) as wide:
        assert (wide.device, wide.lane) == (1, False)
        assert admission._fits(1, 0, narrow=True) is None and not admission._lane_free(0)


def test_a_run_beside_others_never_shares_a_kept_gpu() -> None:
    admission = lanes()
    with admission.admitted(strict=True, files=[A], key=A) as a:
        assert admission._fits(1, 0, narrow=True) == 1 - a.device  # the other GPU only
        with admission.admitted(strict=False, files=[B]) as beside:
            assert beside.device == 1 - a.device
            assert beside.beside and a.beside  # it shared the machine with a strict run
        assert admission._fits(1, 0, narrow=False) is None  # a wide one waits


def test_a_strict_run_waits_for_its_gpu_and_takes_it_first() -> None:
    # B's strict run waits while a run beside others holds its GPU; meanwhile nothing new
    # starts there, and once that run ends it has the GPU to itself
    admission = lanes()
    admission.lanes[B] = 1
    started = threading.Event()
    with admission.admitted(strict=False, files=[A]) as first:  # GPU 0
        with admission.admitted(strict=False, files=[A]) as second:  # GPU 1: least kept
            assert (first.device, second.device) == (0, 1)
            waiting = threading.Thread(target=lambda: _strict_b(admission, started))
            waiting.start()
            with admission._changed:
                admission._changed.wait_for(lambda: admission._reserved.get(1))
            assert not started.is_set()
            assert admission._fits(1, 0, narrow=True) == 0  # not GPU 1: B waits for it
        waiting.join(timeout=60)
        assert started.is_set()


def _strict_b(admission: Admission, started: threading.Event) -> None:
    with admission.admitted(strict=True, files=[B], key=B) as b:
        assert b.device == 1 and b.lane and all(f.device != 1 or f is b for f in admission._flights)
        started.set()


def test_one_gpu_or_files_not_known_to_stay_on_one_keep_every_gpu() -> None:
    single = lanes(devices=1)
    assert not single.is_narrow([A])
    admission = lanes()
    assert not admission.is_narrow([A, WIDE]) and not admission.is_narrow([])
    with admission.admitted(strict=True, files=[WIDE], key=WIDE) as wide:
        assert (wide.device, wide.lane) == (0, False)
        assert admission._fits(1, 0, narrow=True) is None and not admission._lane_free(1)


def test_a_findings_commands_carry_the_gpus_its_strict_runs_saw(tmp_path: Path) -> None:
    victim, provider = f"{A}::test_needs", f"{B}::test_gives"
    tests = (
        TestResult(id=provider, file=B, outcome=Outcome.PASSED),
        TestResult(id=victim, file=A, outcome=Outcome.PASSED),
    )
    run = ModeRun(
        mode=Mode.SUITE, command=("gpuci",), rootdir="/x", workers=1, gpus=("0", "1"), tests=tests
    )
    results = {Mode.SUITE: ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)}
    (found,) = with_lane_views(
        [TestEvidence(id=victim, alone=(Outcome.FAILED,), culprits=(provider,))], {A: "1,0"}
    )
    assert found.gpu == "1,0"
    commands = finding_commands(
        victim,
        Category.DEPENDS_ON_OTHERS,
        searched=Category.DEPENDS_ON_OTHERS,
        evidence=found,
        outcomes={Mode.SUITE: Outcome.PASSED},
        reruns=(Outcome.FAILED,),
        results=results,
        orders={m: interpreter_order(r) for m, r in results.items()},
    )
    assert "CUDA_VISIBLE_DEVICES=1,0 " in commands.reproduce
    assert "CUDA_VISIBLE_DEVICES=1,0 " in commands.with_provider
    # without a view of its own: the serial interpreters' (the plain run's)
    (plain,) = with_lane_views([TestEvidence(id=victim, culprits=(provider,))], {B: "1,0"})
    assert plain.gpu is None
    # evidence.json keeps it
    evidence = Evidence(gpu="0,1", budget_s=None, tests=(found, plain))
    write_json_atomic(tmp_path / "evidence.json", evidence_to_json(evidence))
    assert [t.gpu for t in read_evidence(tmp_path / "evidence.json").tests] == ["1,0", None]


class MeetingProber:
    """A prober whose runs go through a real admission of 2 GPUs: the strict runs of A's and
    B's tests fail, and wait at a barrier for each other (it breaks where they never run at
    once); the lanes they ran in are recorded."""

    def __init__(self) -> None:
        self.admission = lanes()
        self.meet = threading.Barrier(2, timeout=60)
        self.strict_on: dict[str, int] = {}
        self.expensive = False
        self.hides_start_ups = False
        self.notes: list[str] = []

    def exhausted(self) -> bool:
        return False

    def stopping(self) -> bool:
        return False

    def left(self) -> float | None:
        return None

    def run(self, ids: list[str], *, strict: bool = False, **_: object) -> object:
        from gpuci.evidence.probe import ProbeRun

        (test_id,) = ids
        file = test_id.partition("::")[0]
        with self.admission.admitted(strict=strict, files=[file], key=file) as flight:
            if strict:
                self.strict_on[test_id] = flight.device
                self.meet.wait()
        return ProbeRun(outcomes={test_id: Outcome.FAILED}, log=Path("/nonexistent"), log_from=0)


def test_strict_alone_runs_of_files_that_stay_on_one_gpu_run_at_once_a_gpu_each() -> None:
    import io

    from gpuci.evidence.alone import run_alone
    from gpuci.evidence.context import Context
    from gpuci.state.left import Ledger

    prober = MeetingProber()
    a, b = f"{A}::test_one", f"{B}::test_two"
    ctx = Context(
        prober=prober,  # type: ignore[arg-type]
        results={},
        orders={},
        progress=io.StringIO(),
        ledger=Ledger(),
    )
    found = run_alone(
        ctx,
        {a: 1, b: 1},
        failed=frozenset({a, b}),  # likely failing: strict from the start
    )
    assert found[a].alone == found[b].alone == (Outcome.FAILED,)
    assert sorted(prober.strict_on.values()) == [0, 1]  # met at the barrier: at once


def test_the_start_up_that_decides_an_expensive_import_is_the_quickest_uncrowded_one() -> None:
    from gpuci.evidence.admission import EXPENSIVE_START_S
    from gpuci.evidence.budget import fastest_start_up, start_up

    def results(
        startups: list[float | None], ahead: frozenset[int] = frozenset()
    ) -> dict[Mode, ModeResults]:
        files = tuple(
            FileRun(
                file=f"test_{n}.py",
                status=FileStatus.PASSED,
                slot=0,
                gpu="0",
                start=0.0,
                end=6.0,
                interpreters=(
                    Interpreter(
                        exit_code=0,
                        start=0.0,
                        end=6.0,
                        log="l",
                        startup_s=startup,
                        ahead=n in ahead,
                    ),
                ),
            )
            for n, startup in enumerate(startups)
        )
        run = ModeRun(mode=Mode.PARALLEL, command=("gpuci",), rootdir="/x", workers=4, files=files)
        return {Mode.PARALLEL: ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)}

    # 4 GPUs, 23 interpreters started at once: 5 s each in the crowd, one got through in 3 s;
    # one started ahead says nothing (0)
    crowded = results([5.1, 5.3, 3.0, 0.0, 5.2])
    assert start_up(crowded) >= EXPENSIVE_START_S > fastest_start_up(crowded) == 3.0
    # one started ahead and taken before it had collected shows only the rest: not its own
    partly = results([2.2, 0.28, 1.9], ahead=frozenset({1}))
    assert fastest_start_up(partly) == 1.9
    # an import that is expensive everywhere stays expensive
    assert fastest_start_up(results([18.0, 19.5])) == 18.0
    # none measured: the files' walls less their tests' (the median), as the budget's
    assert fastest_start_up(results([None, None])) == start_up(results([None, None])) == 6.0


def test_a_partner_is_never_a_test_that_fails_in_its_own_files_order() -> None:
    # on 4 GPUs a hog and test_pool_limit.py ran on different GPUs in their pair; the pair
    # runs test_pool_limit.py whole, where test_large_workspace fails after the test that
    # caps the pool (its own file's order, as in the isolated screen): no contention
    from gpuci.evidence.classify import Classified
    from gpuci.evidence.pairs import partnerable_tests

    def classified(test_id: str, category: Category, isolated: Outcome, *, inferred: bool = False):
        file = test_id.partition("::")[0]
        result = TestResult(id=test_id, file=file, outcome=isolated, inferred=inferred)
        return Classified(
            id=test_id,
            category=category,
            outcomes={Mode.ISOLATED: isolated},
            reruns=(Outcome.PASSED,),
            results={Mode.ISOLATED: result},
        )

    tests = {
        t.id: t
        for t in (
            classified("p.py::test_large_workspace", Category.ORDER_DEPENDENT, Outcome.FAILED),
            classified("o.py::test_after_another_file", Category.ORDER_DEPENDENT, Outcome.PASSED),
            classified("h.py::test_hog", Category.CONCURRENCY, Outcome.PASSED),
            classified("q.py::test_q", Category.ORDER_DEPENDENT, Outcome.FAILED, inferred=True),
            classified("f.py::test_fails", Category.FAILED, Outcome.FAILED),
        )
    }
    assert partnerable_tests(tests) == {
        "o.py::test_after_another_file",
        "h.py::test_hog",
        "q.py::test_q",  # its file alone never ran: nothing shows its own order fails it
    }
