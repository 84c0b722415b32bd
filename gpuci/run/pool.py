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

from gpuci.run.supervisor import Supervisor

Unit = TypeVar("Unit")


def run_slots(
    files: Sequence[Unit],
    workers: int,
    run_one: Callable[[Unit, int], None],
    supervisor: Supervisor,
    *,
    first_slot: int = 0,
    choose: Callable[[Sequence[Unit]], Unit] | None = None,
    ahead: Callable[[Unit, int], None] | None = None,
) -> None:
    """Run files in up to `workers` slots (numbered from `first_slot`); a slot takes the
    next file as soon as it is free: the first not started, or the one `choose` picks from
    those not started (at that moment: it may learn as the files run).

    With `ahead`, a slot that starts a file also picks its likely next one and starts it
    ahead (`ahead(unit, slot)`: its interpreter starts and collects, held, while this one
    runs), as long as more files are left than slots: at the tail a free slot takes what
    is left. Once free, the slot chooses again with that one back among the rest (`choose`
    may have learned meanwhile); one it passes over is started where it is taken.
    """
    remaining = list(files)
    lock = threading.Lock()
    used = min(workers, len(remaining))

    def take(*, spare: bool = False, back: Sequence[Unit] = ()) -> list[Unit]:
        """The next file, as a list of one (`back` returned among the rest first); none
        once all started, or when stopping, or (`spare`: one to start ahead) where no more
        are left than slots."""
        with lock:
            remaining[:0] = back
            if not remaining or supervisor.stopping.is_set():
                return []
            if spare and len(remaining) <= used:
                return []
            unit = remaining[0] if choose is None else choose(tuple(remaining))
            remaining.remove(unit)
            return [unit]

    def in_a_slot(slot: int) -> None:
        taken = take()
        while taken:
            following = take(spare=True) if ahead is not None else []
            if following and ahead is not None:
                ahead(following[0], slot)
            run_one(taken[0], slot)
            taken = take(back=following)

    if not used:
        return
    with ThreadPoolExecutor(max_workers=used, thread_name_prefix="gpuci-slot") as pool:
        wait_for([pool.submit(in_a_slot, slot) for slot in range(first_slot, first_slot + used)])


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
