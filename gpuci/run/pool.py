"""Pool: run work in a fixed number of slots; a slot takes the next unit as soon as it is free.

The screens' scheduler: `gpuci run` hands it one mode's files, `gpuci check` the units of
every screen at once (the suite interpreter first), so that all share one set of slots.
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from gpuci.run.supervisor import Supervisor

Unit = TypeVar("Unit")


def run_slots(
    files: Sequence[Unit],
    workers: int,
    run_one: Callable[[Unit, int], None],
    supervisor: Supervisor,
    *,
    first_slot: int = 0,
) -> None:
    """Run files in up to `workers` slots (numbered from `first_slot`); a slot takes the
    next file as soon as it is free."""
    if not files:
        return
    slots: queue.SimpleQueue[int] = queue.SimpleQueue()
    for slot in range(first_slot, first_slot + workers):
        slots.put(slot)

    def in_a_slot(key: Unit) -> None:
        slot = slots.get()
        try:
            if not supervisor.stopping.is_set():
                run_one(key, slot)
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpuci-slot") as pool:
        wait_for([pool.submit(in_a_slot, key) for key in files])


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
