"""Waves of a culprit search: the levels speculated, the losers killed and never counted,
how wide a wave may be where an interpreter's start-up is expensive, and the last
candidates' confirmations held ahead there."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cli_runner import fresh_interpreters, write_files

from gpuci.evidence.admission import EXPENSIVE_START_S, Admission, evidence_slots
from gpuci.evidence.requests import Request
from gpuci.evidence.search.bisect import bisect
from gpuci.evidence.search.waves import Node, plan_wave, run_wave
from gpuci.evidence.victims import Task
from gpuci.model import Category, Outcome, Probe
from gpuci.run.proc.launch import Launch

CANDIDATES = [f"test_{i:02d}.py::test_c" for i in range(16)]
LONG_S = 60.0  # a wait that only a bug lets run out (the test then fails, it does not hang)


@dataclass
class Ran:
    """A speculated run's answer: the victim's outcome, whether it was killed."""

    outcome: Outcome
    killed: bool = False
    pending: object = True


@dataclass
class Settling:
    """The prober's part in a wave: which runs were used, which lost."""

    used: list[Ran] = field(default_factory=list)
    lost: list[Ran] = field(default_factory=list)

    def settle(self, ran: Ran, *, used: bool) -> None:
        (self.used if used else self.lost).append(ran)


def test_a_wave_is_the_levels_breadth_first_up_to_its_width() -> None:
    assert plan_wave(16, 1) == [Node(0, 16)]
    assert plan_wave(16, 3) == [Node(0, 16), Node(0, 8), Node(8, 16)]
    # a level that would keep a second half of one test runs that test in the wave
    assert plan_wave(2, 4) == [Node(0, 2), Node(1, 2)]
    assert plan_wave(3, 8) == [Node(0, 3), Node(0, 2), Node(2, 3), Node(1, 2)]
    assert plan_wave(1, 4) == []
    # every level of a search over n runs its first half: ceil(log2 n) levels in all
    for n in (2, 3, 5, 16, 100, 953):
        levels, node = 0, Node(0, n)
        while node.hi - node.lo > 1:
            node, levels = Node(node.lo, node.mid), levels + 1
        assert levels == math.ceil(math.log2(n))


def test_a_loser_still_running_is_killed_and_never_used() -> None:
    # the culprit is in the first half: the root's run shows it, so the run of the second
    # half's first half is a loser; it blocks until killed, and the root answers only
    # once the loser has started, so that it is running when the wave knows
    culprit = CANDIDATES[5]
    loser_started = threading.Event()
    settling = Settling()

    def step(part: Sequence[str], cancel: threading.Event | None) -> tuple[Probe, Ran]:
        assert cancel is not None  # every run of a wave of three is speculated
        if part == CANDIDATES[8:12]:
            loser_started.set()
            assert cancel.wait(LONG_S), "the loser was never killed"
            outcome = Outcome.NOT_RUN
        else:
            assert loser_started.wait(LONG_S)
            outcome = Outcome.FAILED if culprit in part else Outcome.PASSED
        probe = Probe(count=len(part), shown=tuple(part), outcome=outcome)
        return probe, Ran(outcome, killed=cancel.is_set())

    wave = run_wave(
        settling,  # type: ignore[arg-type]
        list(CANDIDATES),
        3,
        step,  # type: ignore[arg-type]
        lambda probe: probe.outcome is Outcome.FAILED,
    )
    # two levels in one wave: the first half shows it, its first quarter does not
    assert wave.current == CANDIDATES[4:8] and not wave.confirmed and not wave.refuted
    assert [probe.count for probe, _ in wave.used] == [8, 4]
    assert (wave.losers, wave.killed) == (1, 1)
    assert len(settling.used) == 2 and settling.lost == [Ran(Outcome.NOT_RUN, killed=True)]


def test_an_inferred_last_candidate_that_does_not_show_it_refutes_the_wave() -> None:
    # it shows after no part alone (it needs two tests): every level keeps a second half
    settling = Settling()

    def step(part: Sequence[str], cancel: threading.Event | None) -> tuple[Probe, Ran]:
        return Probe(count=len(part), shown=(), outcome=Outcome.PASSED), Ran(Outcome.PASSED)

    shows = lambda probe: probe.outcome is Outcome.FAILED  # noqa: E731
    wave = run_wave(settling, CANDIDATES[:2], 4, step, shows)  # type: ignore[arg-type]
    assert wave.refuted and wave.current == CANDIDATES[1:2] and len(wave.used) == 2


def test_an_expensive_start_up_widens_the_evidence_to_the_cores() -> None:
    assert evidence_slots(3, EXPENSIVE_START_S / 10, 16) == 3
    assert evidence_slots(3, 19.3, 16) == 15  # PyTorch's common_utils: every core but one
    assert evidence_slots(3, 19.3, 2) == 3  # never fewer than the check's slots
    assert evidence_slots(4, 19.3, None) == 4  # cores unknown


@pytest.mark.slow
def test_an_interpreter_held_for_a_run_is_the_one_that_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_files(
        tmp_path, {"test_c.py": "def test_a():\n    pass\n\n\ndef test_b():\n    pass\n"}
    )
    monkeypatch.chdir(root)
    out = root / "out"
    interpreters = fresh_interpreters(out)

    def launch(ids: tuple[str, ...]) -> Launch:
        targets = ("test_c.py",)
        return Launch(
            key="test_c.py",
            ids=ids,
            targets=targets,
            slot=0,
            gpu=None,
            attempt=0,
            junit=None,
            label="culprits",
            lane=3,
        )

    try:
        held = interpreters.hold(launch(("test_c.py::test_b",)))
        # its ids are given as it is taken: the run's, whatever lane the run got
        attempt = interpreters.run(launch(("test_c.py::test_b",)), held=held)
        assert [(r.id, r.outcome.value) for r in attempt.results] == [
            ("test_c.py::test_b", "passed")
        ]
        own = Path(held.env["GPUCI_JOURNAL"])
        assert own.name.startswith("test_c.py.3.held-") and "held" in own.read_text()
        assert held.proc.returncode is not None  # it ran, and ended
        # one that collected other files is killed, and the run starts its own
        other = interpreters.hold(dataclasses.replace(launch(()), targets=("test_d.py",)))
        attempt = interpreters.run(launch(("test_c.py::test_a",)), held=other)
        assert [r.outcome.value for r in attempt.results] == ["passed"]
        assert other.proc.poll() is not None
    finally:
        interpreters.close()


@dataclass
class Answer:
    """One run's answer, as the search reads it."""

    result: Outcome
    beside: bool = False
    pending: object = None
    killed: bool = False

    def outcome(self, test_id: str) -> Outcome:
        return self.result


@dataclass
class Holding:
    """A prober whose start-ups are expensive: it holds interpreters ahead, and says which
    run took which, and which it let go."""

    victim: Callable[[Sequence[str]], Outcome]
    expensive: bool = True
    hides_start_ups: bool = True
    admission: Admission = field(default_factory=lambda: Admission(slots=1))
    runs: list[tuple[list[str], object]] = field(default_factory=list)
    held: list[list[str]] = field(default_factory=list)
    let_go_of: list[object] = field(default_factory=list)

    def exhausted(self) -> bool:
        return False

    def stopping(self) -> bool:
        return False

    def hand(self, request: Request, *, label: str) -> object:
        self.held.append(list(request.ids))
        return request.ids  # stands for the interpreter: what it was started to run

    def let_go(self, held: object, *, phase: str, label: str) -> None:
        self.let_go_of.append(held)

    def run(self, ids: Sequence[str], *, handed: object = None, **_: object) -> Answer:
        self.runs.append((list(ids), handed))
        return Answer(self.victim(ids))

    def settle(self, ran: Answer, *, used: bool) -> None:
        pass


def test_an_expensive_search_holds_each_last_candidates_confirmation_ahead() -> None:
    culprit, victim = CANDIDATES[6], "test_v.py::test_victim"
    prober = Holding(lambda ids: Outcome.FAILED if culprit in ids else Outcome.PASSED)
    task = Task(
        victim=victim, category=Category.ORDER_DEPENDENT, candidates=tuple(CANDIDATES), rank=(0, 0)
    )
    search = bisect(prober, task)  # type: ignore[arg-type]
    assert search.culprits == (culprit,)
    # down to four candidates, each one's [candidate, victim] started ahead; the strict
    # confirmation took the culprit's, the other three were let go (killed, never counted)
    assert prober.held == [[c, victim] for c in CANDIDATES[4:8]]
    assert prober.runs[-1] == ([culprit, victim], (culprit, victim))
    assert sorted(prober.let_go_of) == sorted((c, victim) for c in CANDIDATES[4:8] if c != culprit)
    assert search.steps is not None
    assert (search.steps.killed, search.steps.ahead) == (3, 4)
    assert search.steps.runs == len(prober.runs) <= search.steps.bound


@dataclass
class Declaring(Holding):
    """A `Holding` prober that also says which runs a search declared ahead of their turn."""

    declared: list[Request] = field(default_factory=list)

    def start_ahead(self, requests: Sequence[Request]) -> None:
        self.declared.extend(requests)


def test_a_strict_search_declares_its_last_candidates_run_and_confirmation_as_it_knows_them() -> (
    None
):
    # a strict search runs one level at a time (nothing held for a wave): where its halving
    # inferred the last candidate, that candidate's run and its confirmation are declared
    # to the runner as requests as soon as the halving knows them, before either runs
    culprit, victim = CANDIDATES[3], "test_v.py::test_victim"
    prober = Declaring(lambda ids: Outcome.FAILED if culprit in ids else Outcome.PASSED)
    task = Task(
        victim=victim,
        category=Category.ORDER_DEPENDENT,
        candidates=tuple(CANDIDATES[:4]),
        rank=(0, 0),
        strict=True,
    )
    search = bisect(prober, task)  # type: ignore[arg-type]
    assert search.culprits == (culprit,)
    assert prober.declared == [Request(ids=(culprit, victim), strict=True, copies=2)]
    assert prober.held == []  # nothing handed over: its runs take what was declared
    assert [ids for ids, _ in prober.runs[-2:]] == [[culprit, victim], [culprit, victim]]
