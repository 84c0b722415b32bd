"""Pool: run work in a fixed number of slots; a slot takes the next unit as soon as it is free.

The screens' scheduler: `gpuci run` hands it one mode's files, `gpuci check` the units of
every screen at once (the suite interpreter first), so that all share one set of slots.
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from gpuci.supervisor import Supervisor

Unit = TypeVar("Unit")


def run_slots(
    files: Sequence[Unit],
    workers: int,
    run_one: Callable[[Unit, int], None],
    supervisor: Supervisor,
) -> None:
    """Run files in up to `workers` slots; a slot takes the next file as soon as it is free."""
    if not files:
        return
    slots: queue.SimpleQueue[int] = queue.SimpleQueue()
    for slot in range(workers):
        slots.put(slot)

    def in_a_slot(key: Unit) -> None:
        slot = slots.get()
        try:
            if not supervisor.stopping.is_set():
                run_one(key, slot)
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpuci-slot") as pool:
        futures = [pool.submit(in_a_slot, key) for key in files]
        for future in futures:
            while not future.done():  # a timed wait lets Ctrl-C reach the main thread
                with contextlib.suppress(TimeoutError):
                    future.result(timeout=0.5)
            future.result()
