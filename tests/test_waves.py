"""Waves of a culprit search: the levels speculated, the losers killed and never counted,
and how wide a wave may be where an interpreter's start-up is expensive."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuci.evidence.admission import EXPENSIVE_START_S, evidence_slots
from gpuci.evidence.waves import Node, plan_wave, run_wave
from gpuci.model import Outcome, Probe

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
