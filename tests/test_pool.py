"""The pool's slots, with files started ahead: each file runs once, in the slot that
started it ahead, and the tail is left to whichever slot is free."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from gpuci.run.proc.supervisor import Supervisor
from gpuci.run.sched.pool import ahead_depth, run_slots


def test_a_file_started_ahead_runs_once_in_the_slot_that_started_it() -> None:
    files = [f"f{i}" for i in range(12)]
    lock = threading.Lock()
    ran: list[tuple[str, int]] = []
    ahead: dict[str, int] = {}

    def run_one(unit: str, slot: int) -> None:
        with lock:
            ran.append((unit, slot))

    def start_ahead(unit: str, slot: int) -> None:
        with lock:
            assert unit not in ahead, f"{unit} started ahead twice"
            ahead[unit] = slot

    run_slots(files, 3, run_one, Supervisor(), ahead=start_ahead, depth=2)
    assert sorted(u for u, _ in ran) == sorted(files)  # every file, once
    slots = dict(ran)
    assert ahead, "nothing was started ahead"
    assert all(slots[u] == s for u, s in ahead.items()), (ahead, slots)
    # at the tail (no more files left than slots) none is started ahead
    assert len(ahead) <= len(files) - 3


def test_a_slot_runs_its_files_started_ahead_in_the_order_it_chose_them() -> None:
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
    assert started[:2] == ["f1", "f9"] and ran[1:-1] == started, (ran, started)


def test_the_depth_follows_the_idle_cores() -> None:
    assert ahead_depth(5, 16) == 2
    assert ahead_depth(2, 2) == 1  # never none: a start-up behind a file costs little
    assert ahead_depth(2, 64) == 3  # at most MAX_AHEAD


def test_a_slot_with_nothing_left_takes_what_a_busy_slot_started_ahead() -> None:
    # f0 runs until every other file has run: the files its slot started ahead must be
    # taken by the other slot, or f0 would wait for them forever
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
