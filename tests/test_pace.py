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
from gpuci.model import FileRun, FileStatus, Mode, ModeRun, Outcome, TestResult
from gpuci.run.proc.supervisor import Supervisor
from gpuci.run.sched.learning import SuiteClock
from gpuci.run.sched.pace import PlainPace, behind, earlier_pace, slots_beside, slowed
from gpuci.run.sched.pool import run_slots
from gpuci.run.sched.screens import suite_admission

PACE = PlainPace(seconds={"a.py": 1.5, "b.py": 4.5, "c.py": 10.0}, reference="earlier")


def result(test_id: str, seconds: float, *, inferred: bool = False) -> TestResult:
    return TestResult(
        id=test_id,
        file=test_id.split("::", maxsplit=1)[0],
        outcome=Outcome.PASSED,
        duration=seconds,
        inferred=inferred,
    )


def test_behind_is_told_only_over_enough_finished_files() -> None:
    assert behind(PACE, {}) is None
    assert behind(PACE, {"a.py": 3.0}) is None  # 1.5 s of its earlier pace: too little to say
    assert behind(PACE, {"a.py": 3.0, "b.py": 6.0}) == pytest.approx(1.5)
    # a file the earlier check never ran says nothing of the pace
    assert behind(PACE, {"a.py": 1.5, "b.py": 4.5, "new.py": 50.0}) == pytest.approx(1.0)


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
    admit = suite_admission(PACE, suite)
    assert admit is not None
    assert suite_admission(None, suite) is None  # a first check: nothing to run behind
    assert admit(3) == 3
    suite.observe(
        [
            {"e": "start", "id": "a.py::t"},
            {"e": "finish", "id": "a.py::t", "outcome": "passed", "duration": 4.0},
            {"e": "start", "id": "b.py::t"},
            {"e": "finish", "id": "b.py::t", "outcome": "failed", "duration": 8.0},
        ]
    )
    assert admit(3) == 3  # b.py not left yet: only a.py's 1.5 s are known, too few
    suite.observe([{"e": "start", "id": "c.py::t"}])
    assert suite.finished_files() == {"a.py": 4.0, "b.py": 8.0}
    assert admit(3) == 1  # twice its earlier pace
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
    assert slowed(PACE, tests) == {
        "reference": "earlier",
        "files": 2,
        "expected_s": 6.0,
        "took_s": 8.0,
        "ratio": 1.333,
    }
    assert slowed(PACE, [result("new.py::t", 1.0)]) == {}


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
    kept = tmp_path / "durations.json"
    kept.write_text(json.dumps(durations))
    second = gpuci(*check, "--durations", str(kept), cwd=root)
    assert second.returncode == 0, second.stderr
    pace = json.loads((out / "suite" / "run.json").read_text(encoding="utf-8"))["pace"]
    assert pace["reference"] == f"{kept} (check {durations['run_id']})"
    assert pace["files"] == 2 and pace["expected_s"] >= 0.4 and pace["took_s"] >= 0.4
    assert pace["ratio"] == pytest.approx(pace["took_s"] / pace["expected_s"], abs=0.01)
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
