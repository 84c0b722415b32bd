"""What the screens learn as they run: the suite interpreter's time per file, and the
order of the files not started yet that it changes."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from gpuci.run.proc.supervisor import Supervisor
from gpuci.run.sched.learning import LearnedOrder, SuiteClock
from gpuci.run.sched.pool import run_slots


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def start(test_id: str) -> dict[str, str]:
    return {"e": "start", "id": test_id}


def finish(test_id: str) -> dict[str, str]:
    return {"e": "finish", "id": test_id, "outcome": "passed"}


def test_the_suite_clock_measures_a_file_it_left_and_extrapolates_the_one_it_is_in() -> None:
    clock = Clock()
    suite = SuiteClock(clock)
    assert suite.work("a.py", 3) is None  # not reached yet
    suite.observe([start("a.py::t1")])
    clock.now = 1.0
    suite.observe([finish("a.py::t1"), start("a.py::t2")])
    clock.now = 1.5
    # 1.5 s for the first test and a half: the file's 4 tests about 4 x 1.5 / 2
    assert suite.work("a.py", 4) == 3.0
    suite.observe([finish("a.py::t2"), start("b.py::t1")])
    clock.now = 4.0
    assert suite.work("a.py", 4) == 1.5  # it left a.py after 1.5 s: measured, not guessed
    # b.py's one test has run 2.5 s; its file of 2 tests takes at least twice that
    assert suite.work("b.py", 2) == 5.0
    suite.observe([finish("b.py::t1"), {"e": "end", "exitstatus": 0}])
    clock.now = 9.0
    assert suite.work("b.py", 2) == 2.5


def test_a_file_the_suite_found_long_starts_before_longer_files_by_count() -> None:
    clock = Clock()
    suite = SuiteClock(clock)
    counts = {"big.py": 40, "mid.py": 30, "small.py": 20, "slow.py": 2}
    order = LearnedOrder(["big.py", "mid.py", "small.py", "slow.py"], {}, counts, suite)
    # nothing finished: numbers of tests are all there is (not seconds to compare with)
    assert order.choose(["mid.py", "small.py", "slow.py"]) == "mid.py"
    suite.observe([start("slow.py::t1")])
    clock.now = 3.0
    order.finished("big.py", 1.4)  # 40 tests in 1.4 s: a file of 20 is about 0.7 s
    assert order.choose(["mid.py", "small.py", "slow.py"]) == "slow.py"
    # where the suite has not been, the planned order stands
    assert order.choose(["mid.py", "small.py"]) == "mid.py"


def test_an_earlier_checks_durations_stand_where_the_suite_found_less() -> None:
    clock = Clock()
    suite = SuiteClock(clock)
    counts = {"a.py": 1, "b.py": 1}
    order = LearnedOrder(["a.py", "b.py"], {"a.py": 9.0, "b.py": 4.0}, counts, suite)
    suite.observe([start("a.py::t"), finish("a.py::t"), start("b.py::t")])
    clock.now = 1.0
    assert order.choose(["a.py", "b.py"]) == "a.py"  # a.py is 0 s so far in the suite
    clock.now = 12.0  # b.py: 12 s in the suite, longer than a.py's 9 s measured earlier
    assert order.choose(["a.py", "b.py"]) == "b.py"


def test_run_slots_asks_the_chooser_each_time_a_slot_is_free() -> None:
    ran: list[str] = []
    lock = threading.Lock()
    asked: list[tuple[str, ...]] = []

    def run_one(unit: str, slot: int) -> None:
        with lock:
            ran.append(unit)
        time.sleep(0.01)

    def choose(remaining: Sequence[str]) -> str:
        names = tuple(remaining)
        asked.append(names)
        return names[-1]

    run_slots(["a", "b", "c", "d"], 1, run_one, Supervisor(), choose=choose)
    assert ran == ["d", "c", "b", "a"]
    assert asked[0] == ("a", "b", "c", "d") and asked[-1] == ("a",)
