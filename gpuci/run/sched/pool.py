"""Pool: run work in a fixed number of slots; a slot takes the next unit as soon as it is free.

The screens' scheduler: `gpuci run` hands it one mode's files, `gpuci check` the units of
every screen at once (the suite interpreter first), so that all share one set of slots.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from gpuci.run.proc.supervisor import Supervisor

Unit = TypeVar("Unit")
MAX_AHEAD = 3  # files started ahead per slot at most (short files, slow start-ups)
ADMIT_POLL_S = 0.25  # how often a slot held back by `admit` asks again (the journal's pace)


def ahead_count(slots: int, cpus: int) -> int:
    """How many files the pool's `slots` slots keep started ahead: the cores their running
    files leave idle (at least 1: a start-up hidden behind a file costs little), at most
    MAX_AHEAD a slot."""
    return max(1, min(MAX_AHEAD * slots, cpus - slots - 1))


def same_gpus(slot_gpus: Sequence[str | None]) -> Callable[[int, int], bool]:
    """`run_slots`' `alike`: two slots that see the same GPUs in the same order, so that an
    interpreter one of them started ahead fits the other."""
    return lambda a, b: slot_gpus[a] == slot_gpus[b]


def run_slots(  # -- the slots' closures share one queue, one lock and one count
    files: Sequence[Unit],
    workers: int,
    run_one: Callable[[Unit, int], None],
    supervisor: Supervisor,
    *,
    first_slot: int = 0,
    choose: Callable[[Sequence[Unit]], Unit] | None = None,
    ahead: Callable[[Unit, int], None] | None = None,
    depth: int = 1,
    alike: Callable[[int, int], bool] = lambda a, b: True,
    early: Sequence[tuple[Unit, int]] = (),
    admit: Callable[[int], int] | None = None,
) -> None:
    """Run files in up to `workers` slots (numbered from `first_slot`); a slot takes the
    next file as soon as it is free: the first not started, or the one `choose` picks from
    those not started (at that moment: it may learn as the files run).

    With `ahead`, the pool keeps up to `depth` files started ahead (`ahead(unit, slot)`:
    each interpreter starts and collects, held, while the running files run), picked as
    a slot starts a file, to the last one (one queue: no slot waits behind another's
    long file; on CuPy's subset the last 4 files, left to start cold, showed 1.8-2.5 s of
    start-up each). A free slot runs the oldest file started ahead, whichever slot
    started it (it is the likeliest to have collected by now, and `choose` chose it
    when it was started: on CuPy's subset, a learned choice at each free slot left most
    start-ups unhidden, 1.6-2.1 s of 2.4; a queue per slot drained faster than its files
    started where files are shorter than a start-up). Only where the slot that started it
    is `alike` (sees the same GPUs, in the same order): elsewhere its interpreter would be
    started again, cold; a slot with no file of its kind started ahead takes one of the
    rest, and only at the end another kind's. The `early` files (unit, slot) were started
    before the pool began (beside discovery): they count as started ahead by their slots.
    With `admit` (`admit(slots)`: how many of the pool's slots may run a file now), a slot
    whose file would run beyond that waits until one ends or `admit` allows more (the
    suite interpreter beside it runs behind its pace: `gpuci.run.sched.pace`).
    """
    used = min(workers, len(files))
    # a file started beside discovery for a slot this pool does not have (discovery found
    # fewer files than were on disk: one skipped at import) runs like the rest
    slots = range(first_slot, first_slot + used)
    first = [(unit, slot) for unit, slot in early if unit in files and slot in slots]
    taken = {unit for unit, _ in first}
    remaining = [unit for unit in files if unit not in taken]
    lock = threading.Lock()
    started: list[tuple[Unit, int]] = first  # started ahead, by which slot, oldest first
    running = [0]  # files running now, in all the pool's slots

    def take(slot: int, *, spare: bool = False) -> list[Unit]:
        """The next file, as a list of one: the oldest started ahead by an alike slot, else
        one of the rest, else the oldest started ahead; none once all started, or when
        stopping, or (`spare`: one to start ahead, queued) where `depth` are started
        ahead already."""
        with lock:
            if supervisor.stopping.is_set():
                return []
            if not spare:
                mine = [s for s in started if alike(s[1], slot)]
                if mine or (started and not remaining):
                    found = (mine or started)[0]
                    started.remove(found)
                    return [found[0]]
            if not remaining or (spare and len(started) >= depth):
                return []
            unit = remaining[0] if choose is None else choose(tuple(remaining))
            remaining.remove(unit)
            if spare:
                started.append((unit, slot))
            return [unit]

    def admitted() -> None:
        """Wait for a turn to run a file where `admit` holds the slots back."""
        while True:
            with lock:
                if admit is None or supervisor.stopping.is_set() or running[0] < admit(used):
                    running[0] += 1
                    return
            supervisor.stopping.wait(ADMIT_POLL_S)

    def in_a_slot(slot: int) -> None:
        taken = take(slot)
        while taken:
            while ahead is not None and (spare := take(slot, spare=True)):
                ahead(spare[0], slot)
            admitted()
            try:
                run_one(taken[0], slot)
            finally:
                with lock:
                    running[0] -= 1
            taken = take(slot)

    if not used:
        return
    with ThreadPoolExecutor(max_workers=used, thread_name_prefix="gpuci-slot") as pool:
        wait_for([pool.submit(in_a_slot, slot) for slot in slots])


def run_beside(
    unit: Unit, slot: int, run_one: Callable[[Unit, int], None], then: Callable[[], None]
) -> None:
    """Run `unit` in `slot` of its own while `then` runs the rest (the suite interpreter
    beside the pool: it holds slot 0 from start to end, as every serial interpreter)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuci-slot") as pool:
        future = pool.submit(run_one, unit, slot)
        then()
        wait_for([future])


def wait_for(futures: Sequence[Future[None]]) -> None:
    """Wait for every future in turn; a timed wait lets Ctrl-C reach the main thread."""
    for future in futures:
        while not future.done():
            with contextlib.suppress(TimeoutError):
                future.result(timeout=0.5)
        future.result()
