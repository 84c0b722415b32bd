"""The pool's slots, with files started ahead: each file runs once; a free slot runs the
oldest file started ahead, whichever slot started it."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from gpuci.run.proc.supervisor import Supervisor
from gpuci.run.sched.pool import ahead_count, run_slots


def test_every_file_runs_once_and_at_most_depth_are_started_ahead_at_once() -> None:
    files = [f"f{i}" for i in range(12)]
    lock = threading.Lock()
    ran: list[str] = []
    ahead: list[str] = []
    waiting = set()  # started ahead, not yet run
    most = 0

    def run_one(unit: str, slot: int) -> None:
        with lock:  # taken: it runs now, no longer waits
            ran.append(unit)
            waiting.discard(unit)

    def start_ahead(unit: str, slot: int) -> None:
        nonlocal most
        with lock:
            assert unit not in ahead, f"{unit} started ahead twice"
            ahead.append(unit)
            waiting.add(unit)
            most = max(most, len(waiting))

    run_slots(files, 3, run_one, Supervisor(), ahead=start_ahead, depth=4)
    assert sorted(ran) == sorted(files)  # every file, once
    # 4 started ahead at most, and the one its slot just took, whose run begins after
    assert ahead and most <= 4 + 1, (ahead, most)
    # to the last file: only a slot's first file may start cold (one queue, no slot waits
    # behind another's file)
    assert len(files) - len(ahead) <= 3 and set(ahead) <= set(ran), ahead


def test_a_free_slot_runs_the_oldest_file_started_ahead_in_the_order_chosen() -> None:
    # the choice learns as files run: f9 is chosen once f0 ran; the file started ahead
    # while f0 ran (f1) runs first, warm, and f9 is chosen for the next start ahead
    ran: list[str] = []
    started: list[str] = []

    def choose(units: Sequence[str]) -> str:
        return "f9" if ran and "f9" in units else units[0]

    run_slots(
        [f"f{i}" for i in range(10)],
        1,
        lambda unit, _: ran.append(unit),
        Supervisor(),
        choose=choose,
        ahead=lambda unit, _: started.append(unit),
        depth=1,
    )
    assert ran[:3] == ["f0", "f1", "f9"], ran
    assert sorted(ran) == sorted(f"f{i}" for i in range(10))
    assert started[:2] == ["f1", "f9"] and ran[1:] == started, (ran, started)


def test_a_slot_behind_a_long_file_does_not_keep_the_files_started_ahead() -> None:
    # f0 runs until every other file has run: what was started ahead while it began must
    # be taken by the other slot, or f0 would wait for them forever
    files = [f"f{i}" for i in range(8)]
    others_done = threading.Event()
    ran: list[str] = []
    lock = threading.Lock()

    def run_one(unit: str, slot: int) -> None:
        if unit == "f0":
            assert others_done.wait(timeout=60), f"the others never ran: {ran}"
        with lock:
            ran.append(unit)
            if len(ran) == len(files) - 1:
                others_done.set()

    run_slots(files, 2, run_one, Supervisor(), ahead=lambda *_: None, depth=3)
    assert sorted(ran) == sorted(files) and ran[-1] == "f0"


def test_the_files_started_ahead_follow_the_idle_cores() -> None:
    assert ahead_count(5, 16) == 10  # 16 cores, 5 running, gpuci's own one
    assert ahead_count(2, 2) == 1  # never none: a start-up behind a file costs little
    assert ahead_count(2, 64) == 6  # at most 3 a slot


def test_a_file_started_ahead_runs_where_its_slot_sees_the_same_gpus() -> None:
    # slots 0 and 1 see their GPUs in another order: an interpreter one started ahead
    # would start again, cold, in the other; slot 0 is held by its first file until every
    # other file ran, so slot 1 takes its own first and slot 0's only when nothing is left
    files = [f"f{i}" for i in range(10)]
    starter: dict[str, int] = {}
    runs: list[tuple[str, int]] = []
    lock = threading.Lock()
    others_done = threading.Event()

    def start_ahead(unit: str, slot: int) -> None:
        with lock:
            starter[unit] = slot

    def run_one(unit: str, slot: int) -> None:
        if slot == 0 and not runs:
            assert others_done.wait(timeout=60), runs
        with lock:
            runs.append((unit, slot))
            if len(runs) == len(files) - 1:
                others_done.set()

    run_slots(
        files, 2, run_one, Supervisor(), ahead=start_ahead, depth=4, alike=lambda a, b: a == b
    )
    assert sorted(u for u, _ in runs) == sorted(files)
    slot_one = [u for u, s in runs if s == 1]
    crossed = [u for u in slot_one if starter.get(u) == 0]  # slot 0's, run by slot 1
    assert slot_one[len(slot_one) - len(crossed) :] == crossed, (runs, starter)


def test_a_file_started_for_a_slot_the_pool_lacks_runs_like_the_rest() -> None:
    # beside discovery, a file was started for slot 2 (a file skipped at import took slot
    # 1 on disk); discovery found one file, so the pool has slot 1 only
    ran: list[tuple[str, int]] = []
    slot_gpus = (None, None)  # the suite's slot 0 and the files' slot 1

    run_slots(
        ["test_b.py"],
        1,
        lambda unit, slot: ran.append((unit, slot)),
        Supervisor(),
        first_slot=1,
        alike=lambda a, b: slot_gpus[a] == slot_gpus[b],
        early=[("test_b.py", 2)],
    )
    assert ran == [("test_b.py", 1)]
