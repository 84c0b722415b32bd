"""The plain run's pace (`gpuci.run.sched.pace`): the suite interpreter's tests' seconds
against an earlier check's, the slots the screens beside it give up while it runs behind,
and the record a check leaves of how much it was slowed."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from cli_runner import gpuci, write_files

from gpuci.formats import mode_run_to_json, write_json_atomic
from gpuci.model import FileRun, FileStatus, Interpreter, Mode, ModeRun, Outcome, TestResult
from gpuci.run.disk.durations import suite_pace
from gpuci.run.proc.supervisor import Supervisor
from gpuci.run.sched.learning import LearnedOrder, SuiteClock
from gpuci.run.sched.pace import (
    PlainPace,
    Stretch,
    behind,
    defer_heavy,
    earlier_pace,
    heavy,
    pace_line,
    slots_beside,
    slowed,
    stretch_ahead,
)
from gpuci.run.sched.pool import run_slots
from gpuci.run.sched.screens import first_choices, suite_admission

PACE = PlainPace(seconds={"a.py": 1.5, "b.py": 4.5, "c.py": 10.0}, reference="earlier")


def result(test_id: str, seconds: float, *, inferred: bool = False) -> TestResult:
    return TestResult(
        id=test_id,
        file=test_id.split("::", maxsplit=1)[0],
        outcome=Outcome.PASSED,
        duration=seconds,
        inferred=inferred,
    )


def test_behind_is_told_only_over_enough_finished_tests() -> None:
    assert behind(PACE, {}) is None
    # 1.5 s of its earlier pace: too little to say
    assert behind(PACE, {"a.py": (3.0, 1.0)}) is None
    assert behind(PACE, {"a.py": (3.0, 1.0), "b.py": (6.0, 1.0)}) == pytest.approx(1.5)
    # a file the earlier check never ran says nothing of the pace
    done = {"a.py": (1.5, 1.0), "b.py": (4.5, 1.0), "new.py": (50.0, 1.0)}
    assert behind(PACE, done) == pytest.approx(1.0)
    # a long file tells its pace before it ends: half of c.py's tests in 10 s, not 5
    assert behind(PACE, {"c.py": (10.0, 0.5)}) == pytest.approx(2.0)
    assert behind(PACE, {"c.py": (1.0, 0.1)}) is None  # 1 s of its earlier pace so far


@pytest.mark.parametrize(
    ("slots", "ratio", "allowed"),
    [
        (4, None, 4),  # no pace known: every slot
        (4, 1.0, 4),
        (4, 1.1, 4),  # within 10 % of its pace
        (4, 1.3, 3),
        (4, 2.0, 2),
        (4, 9.0, 1),  # never none: the screens go on
        (1, 3.0, 1),
    ],
)
def test_the_screens_give_up_slots_the_further_the_suite_runs_behind(
    slots: int, ratio: float | None, allowed: int
) -> None:
    assert slots_beside(slots, ratio) == allowed


def test_the_suites_journal_tells_the_admission_how_far_behind_it_runs() -> None:
    suite = SuiteClock(lambda: 0.0)
    counts = {"a.py": 1, "b.py": 1, "c.py": 4}
    admit = suite_admission(PACE, suite, counts)
    assert admit is not None
    assert suite_admission(None, suite, counts) is None  # a first check: nothing to run behind
    assert admit(3) == 3
    suite.observe([{"e": "start", "id": "a.py::t"}])
    assert admit(3) == 3  # nothing finished yet
    suite.observe(
        [
            {"e": "finish", "id": "a.py::t", "outcome": "passed", "duration": 4.0},
            {"e": "start", "id": "b.py::t"},
            {"e": "finish", "id": "b.py::t", "outcome": "failed", "duration": 8.0},
        ]
    )
    assert admit(3) == 1  # b.py's one test finished too: 12 s against 6 s before
    suite.observe([{"e": "start", "id": "c.py::t"}])
    assert suite.progress(counts) == {"a.py": (4.0, 1.0), "b.py": (8.0, 1.0), "c.py": (0.0, 0.0)}
    assert admit(3) == 1  # still twice its earlier pace
    # c.py's first 2 tests of 4 in 2 s, where the whole file took 10 s before: it catches up
    suite.observe(
        [
            {"e": "finish", "id": "c.py::t", "outcome": "passed", "duration": 1.0},
            {"e": "start", "id": "c.py::u"},
            {"e": "finish", "id": "c.py::u", "outcome": "passed", "duration": 1.0},
        ]
    )
    assert suite.progress(counts)["c.py"] == (2.0, 0.5)
    assert admit(3) == 2  # 14 s against 11 s before: 1.27x
    suite.observe([{"e": "end", "exitstatus": 0}])
    assert admit(3) == 3  # it ended: the rest of the screens take every slot


def test_a_pool_held_back_runs_no_more_files_at_once_than_admitted() -> None:
    lock = threading.Lock()
    running, most = [0], [0]

    def run_one(unit: str, slot: int) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        with lock:
            running[0] -= 1

    asked: list[int] = []

    def admit(slots: int) -> int:
        asked.append(slots)
        return 1

    run_slots(["a", "b", "c", "d", "e", "f"], 3, run_one, Supervisor(), admit=admit)
    assert most[0] == 1 and set(asked) == {3}


def test_a_pool_not_held_back_runs_its_files_side_by_side() -> None:
    together = threading.Barrier(3, timeout=60)  # broken unless 3 run at once

    def run_one(unit: str, slot: int) -> None:
        together.wait()

    run_slots(["a", "b", "c"], 3, run_one, Supervisor(), admit=lambda slots: slots)


def test_the_record_says_how_much_slower_the_suite_ran_over_the_files_both_ran() -> None:
    tests = [
        result("a.py::t1", 1.5),
        result("a.py::t2", 1.5),
        result("b.py::t", 5.0),
        result("new.py::t", 7.0),  # not in the earlier check: not compared
        result("c.py::t", 99.0, inferred=True),  # not run: its seconds say nothing
    ]
    interpreters = [
        # held: started before the screens' clock, collected, released at its 0
        Interpreter(exit_code=None, signal=11, start=-3.0, end=20.0, log="1", startup_s=2.5),
        # resumed after its crash: from its collection's end
        Interpreter(exit_code=0, start=20.5, end=22.0, log="2", startup_s=0.5),
    ]
    assert slowed(PACE, tests, interpreters) == {
        "reference": "earlier",
        "files": 2,
        "expected_s": 6.0,
        "took_s": 8.0,
        "ratio": 1.333,
        "running_s": 21.0,
        "tests_s": 15.0,
    }
    told = pace_line(slowed(PACE, tests, interpreters))
    assert told.endswith(
        "took 8.0 s in its tests against 6.0 s in earlier (+33 %, 2 files); it ran 21.0 s"
        " after its collection, 6.0 s of them between its tests (pytest's reports, gpuci's"
        " journal and ledger, waiting for a core)"
    )
    assert slowed(PACE, [result("new.py::t", 1.0)]) == {}


def test_the_pace_carried_is_the_fastest_seen_rising_halfway_towards_a_slower_one() -> None:
    now = {"a.py": 3.0, "b.py": 4.0, "new.py": 1.0}
    earlier = {"a.py": 1.0, "b.py": 10.0, "gone.py": 5.0}
    assert suite_pace(now, earlier) == {"a.py": 2.0, "b.py": 4.0, "new.py": 1.0}
    assert suite_pace(now, {}) == now


def suite_run(tests: list[TestResult], run_id: str = "r1") -> ModeRun:
    return ModeRun(
        mode=Mode.SUITE,
        command=("gpuci",),
        rootdir="/x",
        workers=1,
        run_id=run_id,
        files=(
            FileRun(file="(suite)", status=FileStatus.PASSED, slot=0, gpu=None, start=0, end=3),
        ),
        tests=tuple(tests),
    )


def test_the_earlier_pace_comes_from_the_durations_file_else_the_replaced_check(
    tmp_path: Path,
) -> None:
    history = tmp_path / "aside"
    (history / "suite").mkdir(parents=True)
    write_json_atomic(
        history / "suite" / "run.json",
        mode_run_to_json(suite_run([result("a.py::t", 1.0), result("a.py::u", 2.0)])),
    )
    found = earlier_pace(None, history)
    replaced = "the earlier check in OUT (check r1)"
    assert found == PlainPace(seconds={"a.py": 3.0}, reference=replaced)
    durations = tmp_path / "durations.json"
    files = {"a.py": {"parallel": 9.0, "suite": 5.0}}
    written = {"schema": "gpuci.durations/1", "run_id": "r0", "files": files}
    durations.write_text(json.dumps(written))
    assert earlier_pace(durations, history) == PlainPace(
        seconds={"a.py": 5.0}, reference=f"{durations} (check r0)"
    )
    # a durations file of an older gpuci, without the suite's times: the replaced check's
    files = {"a.py": {"parallel": 9.0}}
    durations.write_text(json.dumps({"schema": "gpuci.durations/1", "files": files}))
    assert earlier_pace(durations, history) == found
    assert earlier_pace(None, tmp_path / "nothing") is None


SLOW_SUITE = {
    "pytest.ini": "[pytest]\n",
    "tests/test_a.py": "import time\n\ndef test_a():\n    time.sleep(0.2)\n",
    "tests/test_b.py": "import time\n\ndef test_b():\n    time.sleep(0.2)\n",
}


@pytest.mark.slow
def test_a_check_records_how_much_the_suite_interpreter_was_slowed(tmp_path: Path) -> None:
    root = write_files(tmp_path / "suite", SLOW_SUITE)
    out = tmp_path / "out"
    check = ("check", "tests", "--out", str(out), "--modes", "suite,parallel")
    first = gpuci(*check, cwd=root)
    assert first.returncode == 0, first.stderr
    # a first check has nothing to be slowed against; its durations carry the suite's times
    assert "pace" not in json.loads((out / "suite" / "run.json").read_text(encoding="utf-8"))
    durations = json.loads((out / "durations.json").read_text(encoding="utf-8"))
    assert durations["files"]["tests/test_a.py"]["suite"] >= 0.2
    # the pace carried: each file's tests seen at 0.1 s once (a quieter machine)
    for name in ("tests/test_a.py", "tests/test_b.py"):
        durations["files"][name]["suite"] = 0.1
    kept = tmp_path / "durations.json"
    kept.write_text(json.dumps(durations))
    second = gpuci(*check, "--durations", str(kept), cwd=root)
    assert second.returncode == 0, second.stderr
    suite = json.loads((out / "suite" / "run.json").read_text(encoding="utf-8"))
    pace = suite["pace"]
    assert pace["reference"] == f"{kept} (check {durations['run_id']})"
    assert pace["files"] == 2 and pace["expected_s"] == 0.2 and pace["took_s"] >= 0.4
    # the next check is held to the faster pace, risen halfway towards this one's
    now = {t["file"]: t["duration"] for t in suite["tests"]}
    carried = json.loads((out / "durations.json").read_text(encoding="utf-8"))["files"]
    assert {f: carried[f]["suite"] for f in now} == {
        f: round((s + 0.1) / 2, 3) for f, s in now.items()
    }
    assert pace["ratio"] == pytest.approx(pace["took_s"] / pace["expected_s"], abs=0.01)
    # the interpreter ran its tests and what came between them
    assert pace["running_s"] >= pace["tests_s"] >= pace["took_s"]
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    assert verdict["modes"]["suite"]["pace"] == pace
    told = "the suite interpreter (the plain run) took"
    assert f"plain run: {told}" in second.stdout + second.stderr
    assert told in (out / "report.html").read_text(encoding="utf-8")
    assert told in (out / "comment.md").read_text(encoding="utf-8")
    # a check into the same OUT without --durations is told against the one it replaced
    third = gpuci(*check, cwd=root)
    assert third.returncode == 0, third.stderr
    pace = json.loads((out / "suite" / "run.json").read_text(encoding="utf-8"))["pace"]
    assert pace["reference"].startswith("the earlier check in OUT (check ")


def test_heavy_files_are_twice_the_mean_or_more() -> None:
    assert heavy({"a.py": 1.0, "b.py": 1.0, "c.py": 10.0}) == {"c.py"}
    assert heavy({"a.py": 1.0, "b.py": 1.5}) == set()
    assert heavy({"c.py": 10.0}) == set()  # one file is no heavier than itself
    assert heavy({"a.py": 0.0, "b.py": 0.0}) == set()


# the suite interpreter's earlier pace: one heavy file (10 s) among short ones (1 s)
SUITE_ORDER = ("s0.py", "big.py", "s2.py", "s3.py", "s4.py", "s5.py", "s6.py")
SUITE_PACE = PlainPace(
    seconds={f: 10.0 if f == "big.py" else 1.0 for f in SUITE_ORDER}, reference="earlier"
)


def test_the_suites_heavy_stretch_is_placed_from_where_its_journal_says_it_is() -> None:
    stretch = stretch_ahead(SUITE_PACE, SUITE_ORDER, None, 0.0)  # before its first test
    assert stretch == Stretch(windows=((1.0, 11.0),), end=16.0)
    assert stretch_ahead(SUITE_PACE, SUITE_ORDER, "big.py", 4.0) == Stretch(
        windows=((0.0, 6.0),), end=11.0
    )
    assert stretch_ahead(SUITE_PACE, SUITE_ORDER, "s3.py", 0.5).windows == ()


@pytest.mark.parametrize(
    ("seconds", "current", "spent", "deferred"),
    [
        (4.0, None, 0.0, True),  # beside big.py, and 11 + 4 s still ends by the suite's 16 s
        (0.5, None, 0.0, False),  # ends before big.py starts
        (6.0, None, 0.0, False),  # after big.py it would end after the suite: no gain
        (4.0, "s2.py", 0.0, False),  # big.py is behind it
        (2.0, "big.py", 9.0, True),  # big.py's last second, then 2 s of short files
    ],
)
def test_a_heavy_file_waits_for_the_suites_heavy_stretch_only_where_it_costs_nothing(
    seconds: float, current: str | None, spent: float, deferred: bool
) -> None:
    stretch = stretch_ahead(SUITE_PACE, SUITE_ORDER, current, spent)
    assert defer_heavy(seconds, stretch) is deferred


def journal_at(suite: SuiteClock, file: str) -> None:
    suite.observe([{"e": "start", "id": f"{file}::t"}])


def test_the_order_keeps_a_heavy_file_from_the_suites_heavy_stretch() -> None:
    now = [0.0]
    suite = SuiteClock(lambda: now[0])
    planned = ["heavy.py", "p1.py", "p2.py", "p3.py"]
    durations = {"heavy.py": 4.0, "p1.py": 1.0, "p2.py": 0.9, "p3.py": 0.8}
    counts = dict.fromkeys(planned, 1)
    order = LearnedOrder(
        planned, durations, counts, suite, pace=SUITE_PACE, suite_order=SUITE_ORDER
    )
    # the suite is about to start big.py: the heavy file waits, the longest light one runs
    assert order.choose(planned) == "p1.py"
    assert first_choices(order, planned, 2) == ["p1.py", "p2.py"]
    journal_at(suite, "s2.py")  # the suite left big.py: the heavy file goes now
    assert order.choose(planned) == "heavy.py"
    # without the suite's pace (a first check) the longest goes first, as it always did
    plain = LearnedOrder(planned, durations, counts, SuiteClock(lambda: 0.0))
    assert plain.choose(planned) == "heavy.py"
    # only heavy files left: the heavy one runs, there is nothing to run meanwhile
    alone = LearnedOrder(planned, durations, counts, SuiteClock(lambda: 0.0), pace=SUITE_PACE)
    assert alone.choose(["heavy.py"]) == "heavy.py"


def test_a_file_heavy_by_device_memory_waits_too() -> None:
    suite = SuiteClock(lambda: 0.0)
    planned = ["hungry.py", "p1.py", "p2.py", "p3.py"]
    durations = dict.fromkeys(planned, 3.0)  # alike by seconds
    peaks = {"p1.py": 500, "p2.py": 500, "p3.py": 500, "hungry.py": 20_000}
    order = LearnedOrder(
        planned,
        durations,
        dict.fromkeys(planned, 1),
        suite,
        pace=SUITE_PACE,
        suite_order=SUITE_ORDER,
        peaks=peaks,
    )
    assert order.choose(["hungry.py", "p3.py"]) == "p3.py"
    suite.observe([{"e": "end", "exitstatus": 0}])  # the suite ended: nothing to keep apart
    assert order.choose(["hungry.py", "p3.py"]) == "hungry.py"
