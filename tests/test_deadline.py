"""Deadline: a test the suite interpreter passed quickly is cut as hung in another screen
after 20 times its time (never sooner than the floor), not after the whole --timeout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuci.model import UsageError
from gpuci.run.proc.deadline import START_FLOOR_S, Deadline, hang_limit_of
from tests.cli_runner import clean_env, gpuci, write_files

TOOK = {"t.py::quick": 0.5, "t.py::slow": 10.0}


def test_a_quick_test_is_cut_after_the_floor_a_slow_one_after_20_times() -> None:
    limit = hang_limit_of(TOOK.get, {})
    assert limit is not None
    deadline = Deadline(3600, limit)
    deadline.observe([{"e": "start", "id": "t.py::quick"}])
    assert not deadline.expired(29.0)
    assert deadline.expired(31.0)
    assert deadline.limit == 30.0 and "ran it in 0.50s" in deadline.why
    slow = Deadline(3600, limit)
    slow.observe([{"e": "start", "id": "t.py::slow"}])
    assert not slow.expired(150.0) and slow.expired(201.0)  # 20 x 10 s


def test_only_the_timeout_counts_between_tests_and_for_unknown_ones() -> None:
    deadline = Deadline(60, hang_limit_of(TOOK.get, {}))
    deadline.observe([{"e": "start", "id": "t.py::unknown"}])
    assert not deadline.expired(59.0) and deadline.expired(61.0)
    assert deadline.limit == 60 and deadline.why == ""
    between = Deadline(60, hang_limit_of(TOOK.get, {}))
    between.observe([{"e": "start", "id": "t.py::quick"}, {"e": "finish", "id": "t.py::quick"}])
    assert not between.expired(45.0)  # collection or teardown: the timeout's
    shorter = Deadline(10, hang_limit_of(TOOK.get, {}))  # a timeout below the floor wins
    shorter.observe([{"e": "start", "id": "t.py::quick"}])
    assert shorter.expired(11.0) and shorter.why == ""


def test_the_floor_is_the_users_to_move_or_turn_off() -> None:
    assert hang_limit_of(TOOK.get, {"GPUCI_HANG_FLOOR_S": "0"}) is None
    limit = hang_limit_of(TOOK.get, {"GPUCI_HANG_FLOOR_S": "5"})
    assert limit is not None
    seconds, _ = limit("t.py::quick") or (0.0, "")
    assert seconds == 10.0  # 20 x 0.5 s, above the floor of 5
    with pytest.raises(UsageError, match="GPUCI_HANG_FLOOR_S='soon'"):
        hang_limit_of(TOOK.get, {"GPUCI_HANG_FLOOR_S": "soon"})


HANGS_IN_PARALLEL = {
    "test_hangs.py": """
        import os, time

        def test_stuck_beside_others():
            if os.environ.get("GPUCI_MODE") == "parallel":
                time.sleep(3600)  # as a thread waiting on a lock no one releases
        """,
    "test_other.py": "def test_fine():\n    pass\n",
}


@pytest.mark.slow
def test_a_hang_the_suite_interpreter_did_not_have_is_cut_not_waited_out(tmp_path: Path) -> None:
    suite = write_files(tmp_path / "suite", HANGS_IN_PARALLEL)
    out = tmp_path / "out"
    env = {**clean_env(), "GPUCI_HANG_FLOOR_S": "2"}
    # a timeout of an hour: the check ends (within the harness's 600 s) only by the cut
    proc = gpuci("check", ".", "--out", str(out), "--timeout", "3600", cwd=suite, env=env)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    parallel = json.loads((out / "parallel" / "run.json").read_text())
    stuck = next(t for t in parallel["tests"] if t["id"].endswith("test_stuck_beside_others"))
    assert stuck["outcome"] == "timed-out", stuck
    assert "cut as hung: the suite interpreter ran it in" in stuck["message"], stuck
    verdict = json.loads((out / "verdict.json").read_text())
    test = next(t for t in verdict["tests"] if t["id"].endswith("test_stuck_beside_others"))
    assert test["outcomes"]["suite"] == "passed"


def test_start_up_and_collection_are_cut_no_sooner_than_their_floor() -> None:
    # a short --timeout is the most one test may run: an interpreter a loaded machine
    # started slowly was cut before its first test (and asked nothing)
    deadline = Deadline(2, hang_limit_of(TOOK.get, {}))
    assert not deadline.expired(START_FLOOR_S - 1)
    assert deadline.expired(START_FLOOR_S + 1) and deadline.limit == START_FLOOR_S
    # once a test started, the timeout is the limit again, between tests too
    deadline = Deadline(2, None)
    deadline.observe([{"e": "start", "id": "t.py::unknown"}])
    assert deadline.expired(3.0) and deadline.limit == 2
    deadline.observe([{"e": "finish", "id": "t.py::unknown"}])
    assert deadline.expired(3.0)
    # a timeout above the floor is the limit before the first test too
    assert not Deadline(120, None).expired(60.0)
    assert not Deadline(None, None).expired(3600.0)  # no timeout: nothing cuts


def test_a_wrappers_own_timeout_has_no_start_floor() -> None:
    # compute-sanitizer's limit covers its own slow start-up: a hung tool is cut at it
    deadline = Deadline(2, None, start_floor=0.0)
    assert deadline.expired(3.0) and deadline.limit == 2
