"""Ahead: evidence interpreters started before their turn, so that their start-up is hidden.

A strict run has nothing beside it on its GPUs, so strict runs go one after another, and
each fresh interpreter pays its start-up (Python, the suite's imports, CuPy's, collection:
often most of a short test's run) while the GPU idles. As the screens
do (DESIGN, "Fresh interpreters, started ahead"), the next interpreter starts while the
current run goes on and is held after its collection until its turn: a run that must wait
for its admission starts its own ahead (`for_run`), and a caller that knows its next run
(alone-runs one after another) offers that one (`offer`). An interpreter collects its
files with its run's environment and GPUs and learns its tests only when released, so any
later run of the same files, environment and view takes it; it runs fresh, as if started
then.

Only where a start-up is worth hiding (`AHEAD_START_S`: a plain CPU suite's is not, and
on a small machine the extra start-ups would take the cores its runs need), and no more
started ahead at once than the check's slots or the cores (`ahead_limit`: a CuPy
section's strict runs one after another each take one, held idle once collected); those
offered beyond it start in the order offered as others are taken. One never taken is
killed at the end. A strict run's GPUs are known before its admission; a run beside
others on several GPUs starts ahead on the GPU it would start on now, and its admission
keeps it there where the memory kept then still holds it (else the interpreter is ended
and the run starts fresh).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuci.evidence.admission import Admission
from gpuci.run.proc.discover import pytest_target
from gpuci.run.proc.held import WORTH_HIDING_S, Held, end_held
from gpuci.run.proc.interpreter import Interpreters
from gpuci.run.proc.launch import Launch

# a start-up this long (the quickest of the screens' interpreters) is worth hiding
AHEAD_START_S = WORTH_HIDING_S
# an interpreter held idle this long gives its place to one offered later, where the limit
# is reached: the run it was offered for may never come (a victim whose hint answered
# before its depends-on-others search: such offers can fill the limit, and every later
# run starts cold; shorter, a strict hog's runs outlast the offers for the runs after
# them, which are ended before their turn)
STALE_S = 20.0
START_WAIT_S = 10.0  # the longest a run waits for its interpreter's start (a fork) to return


def ahead_limit(slots: int, cpus: int | None) -> int:
    """How many evidence interpreters may be out started ahead at once: the check's
    `slots`, or the machine's cores where more (an interpreter starting takes a core, at
    a lower priority than the runs'; one held after its collection waits idle. At half
    the cores, the interpreters of a pair search's sides can fill the limit for the
    hinted searches' runs after them, which then start cold)."""
    return max(1, slots, cpus or 1)


_Key = tuple[tuple[str, ...], str | None, tuple[tuple[str, str], ...]]


def evidence_launch(
    rootdir: Path,
    ids: Sequence[str],
    files: Sequence[str],
    *,
    gpu: str | None,
    label: str,
    env: Mapping[str, str] | None = None,
) -> Launch:
    """The launch of an evidence interpreter: `files` collected, `ids` run (where started
    ahead, once it is released); the victim's file, the last, names its journal."""
    return Launch(
        key=files[-1],
        ids=tuple(ids),
        targets=tuple(pytest_target(rootdir, f) for f in files),
        slot=0,
        gpu=gpu,
        attempt=0,
        junit=None,
        label=label,
        env=dict(env or {}),
    )


def _key(launch: Launch) -> _Key:
    """What an interpreter started ahead must share with the run that takes it."""
    return launch.targets, launch.gpu, tuple(sorted(launch.env.items()))


@dataclass(slots=True)
class Ahead:
    """The interpreters started ahead: offered ones wait in a pool for a run to take them;
    a waiting run's own is reserved for it. Never more out at once than `limit`."""

    interpreters: Interpreters
    admission: Admission
    views: tuple[str | None, ...]  # what a run sees, by the GPU it starts on first
    rootdir: Path
    limit: int  # the check's slots
    on: bool  # a start-up takes AHEAD_START_S or more
    started: int = 0  # interpreters started ahead
    taken: int = 0  # of them, those a run took
    early: int = 0  # of them, those started before the evidence began (`gpuci.evidence.early`)
    _pool: list[tuple[_Key, Held]] = field(default_factory=list)
    # offered beyond the limit: started in the order offered, as others leave the account
    _queue: list[tuple[_Key, Launch]] = field(default_factory=list)
    _out: int = 0  # started and not yet released or ended (pooled or reserved)
    # popped from the queue and being started: a run asking meanwhile waits for it, or it
    # would find neither its offer nor its interpreter and start cold beside it
    _starting: list[_Key] = field(default_factory=list)
    # by interpreter: since when it counts as idle, where not since its start (`renew`)
    _since: dict[int, float] = field(default_factory=dict)
    # offered for runs that come whatever the others find (the runs in threads): never
    # ended to make room, however long they wait
    _certain: set[_Key] = field(default_factory=set)
    _lock: threading.Condition = field(default_factory=threading.Condition)

    def offer(
        self,
        ids: Sequence[str],
        files: Sequence[str],
        *,
        strict: bool,
        env: Mapping[str, str] | None,
        copies: int = 1,
        certain: bool = False,
    ) -> None:
        """Start the interpreters of later runs of `ids` from `files`, for them to take,
        until `copies` wait for them: now, or where the limit is reached once others leave
        (in the order offered); none where their GPUs are not known yet. `certain`: their
        runs come whatever the others find, so they are never ended to make room."""
        launch = self._launch(ids, files, strict=strict, env=env)
        if launch is not None:
            if certain:
                with self._lock:
                    self._certain.add(_key(launch))
            self._queue_copies(launch, copies)

    def offer_seeing(
        self, ids: Sequence[str], files: Sequence[str], gpu: str | None, *, copies: int = 1
    ) -> None:
        """`offer`, for a run that sees `gpu` whatever its admission (a pair's side)."""
        if self.on:
            launch = evidence_launch(self.rootdir, ids, files, gpu=gpu, label="ahead")
            self._queue_copies(launch, copies)

    def take(self, files: Sequence[str], gpu: str | None) -> Held | None:
        """One interpreter offered for a run of `files` seeing `gpu` (no environment of its
        own), taken out of the pool; None where none waits."""
        key = _key(evidence_launch(self.rootdir, (), files, gpu=gpu, label="ahead"))
        with self._lock:
            self._wait_started(lambda starting: starting == key)
            taken = self._pop_pooled(lambda pooled: pooled == key)
        if taken is None:
            return None
        self.released(taken[1], used=True)
        return taken[1]

    def withdraw(
        self,
        ids: Sequence[str],
        files: Sequence[str],
        *,
        strict: bool,
        env: Mapping[str, str] | None,
    ) -> None:
        """One interpreter offered for a run of `ids` that will not come after all: its
        offer dropped where not started yet, else the latest started ended."""
        launch = self._launch(ids, files, strict=strict, env=env)
        if launch is None:
            return
        key = _key(launch)
        with self._lock:
            self._wait_started(lambda starting: starting == key)
            queued = [i for i, (k, _) in enumerate(self._queue) if k == key]
            if queued:
                del self._queue[queued[-1]]
                return
            pooled = [i for i, (k, _) in enumerate(self._pool) if k == key]
            held = self._pool.pop(pooled[-1])[1] if pooled else None
        if held is not None:
            self.released(held, used=False)

    def _queue_copies(self, launch: Launch, copies: int) -> None:
        key = _key(launch)
        with self._lock:
            have = sum(1 for k, _ in self._pool if k == key)
            have += sum(1 for k, _ in self._queue if k == key)
            self._queue += [(key, launch)] * max(0, copies - have)
        self._start_queued()

    def _start_queued(self) -> None:
        """Start the interpreters offered, in order, while the limit allows; where it does
        not, one held idle STALE_S or more makes room (its run may never come)."""
        while not self.interpreters.supervisor.stopping.is_set():
            stale: Held | None = None
            with self._lock:
                if not self._queue:
                    return
                if not self._may_start():
                    stale = self._stalest()
                    if stale is None:
                        return
                key, launch = self._queue.pop(0)
                self._out += stale is None
                self.started += 1
                self._starting.append(key)
            if stale is not None:  # its account's place goes to the one queued
                self.interpreters.supervisor.discard(stale.proc)
                end_held(stale)
            held: Held | None = None
            try:
                held = self.interpreters.hold(launch)
            finally:
                with self._lock:  # pooled as it leaves `_starting`: no run misses both
                    self._starting.remove(key)
                    if held is not None:
                        self._pool.append((key, held))
                    else:  # it did not start: its place in the account is free
                        self._out -= 1
                    self._lock.notify_all()

    def _wait_started(self, fits: Callable[[_Key], bool]) -> None:
        """Wait (under the lock) until no interpreter whose key `fits` is being started: it
        is pooled then (a start is a fork, not a collection)."""
        self._lock.wait_for(lambda: not any(fits(k) for k in self._starting), timeout=START_WAIT_S)

    def _pop_pooled(self, fits: Callable[[_Key], bool]) -> tuple[_Key, Held] | None:
        """The first pooled interpreter still running whose key `fits`, taken out (under
        the lock)."""
        for index, (pooled, held) in enumerate(self._pool):
            if fits(pooled) and held.proc.poll() is None:
                del self._pool[index]
                return pooled, held
        return None

    def _stalest(self) -> Held | None:
        """The interpreter pooled longest whose run is not certain, taken out, where it
        waited STALE_S or more (a run in threads, offered as the classification knows it,
        may wait long for its turn: ended for another offer, it starts again cold)."""
        now = time.monotonic()
        for index, (key, held) in enumerate(self._pool):
            if key in self._certain:
                continue
            if now - self._since.get(id(held), held.started) < STALE_S:
                return None
            return self._pool.pop(index)[1]
        return None

    def renew(self, files: Collection[str]) -> int:
        """The evidence begins with the interpreters started before it, while the isolated
        pass ran (`gpuci.evidence.early`): those of `files` (its first runs') wait on, idle
        from now; the others, whose runs the isolated pass made unlikely, are ended, and
        offers not started dropped. How many were ended."""
        keep = {(pytest_target(self.rootdir, f),) for f in files}
        now = time.monotonic()
        with self._lock:
            self._queue.clear()
            gone = [held for key, held in self._pool if key[0] not in keep]
            self._pool = [(key, held) for key, held in self._pool if key[0] in keep]
            for _, held in self._pool:
                self._since[id(held)] = now
        for held in gone:
            self.released(held, used=False)
        return len(gone)

    def for_run(
        self,
        ids: Sequence[str],
        files: Sequence[str],
        *,
        strict: bool,
        env: Mapping[str, str] | None,
        need_mib: int,
    ) -> tuple[Held, str | None] | None:
        """A run's interpreter started before its turn, and the view it sees: one offered for
        it, else one started now where the run (of `need_mib` device memory) must wait for
        its admission."""
        launch = self._launch(ids, files, strict=strict, env=env)
        if launch is None:
            return None
        key = _key(launch)
        # a run beside others on several GPUs takes one started on any of them: its
        # admission prefers that GPU (`Admission.admitted`)
        any_view = not strict and self.admission.devices > 1

        def fits(pooled: _Key) -> bool:
            return pooled == key or (any_view and pooled[0::2] == key[0::2])

        with self._lock:
            self._wait_started(fits)
            taken = self._pop_pooled(fits)
            if taken is not None:
                return taken[1], taken[0][1]
            # its offer not started yet is this run's, which starts now
            queued = next((i for i, (k, _) in enumerate(self._queue) if k == key), None)
            if queued is not None:
                del self._queue[queued]
            if not self._may_start():
                return None
        waits = self.admission.would_wait(
            strict=strict, need_mib=need_mib, files=files, key=files[-1]
        )
        if not waits:
            return None
        with self._lock:
            if not self._may_start():
                return None
            self._out += 1
            self.started += 1
        return self.interpreters.hold(launch), launch.gpu

    def released(self, held: Held, *, used: bool) -> None:
        """`held` leaves the account: taken by its run (`used`), or ended unused."""
        if not used:
            self.interpreters.supervisor.discard(held.proc)
            end_held(held)
        with self._lock:
            self._out -= 1
            self.taken += used
        self._start_queued()

    def drop_queued(self) -> None:
        """The offers not started yet, dropped."""
        with self._lock:
            self._queue.clear()

    def close(self) -> int:
        """End every interpreter offered and never taken; how many."""
        with self._lock:
            pool, self._pool, self._queue = self._pool, [], []
        for _, held in pool:
            self.released(held, used=False)
        return len(pool)

    def to_json(self) -> dict[str, int]:
        """evidence.json's `concurrency`, where any interpreter was started ahead: how many,
        how many a run took, and how many started before the evidence began."""
        with self._lock:
            if not self.started:
                return {}
            early = {"ahead_early": self.early} if self.early else {}
            return {"ahead": self.started, "ahead_taken": self.taken, **early}

    def _may_start(self) -> bool:
        return self.on and self._out < self.limit

    def _launch(
        self,
        ids: Sequence[str],
        files: Sequence[str],
        *,
        strict: bool,
        env: Mapping[str, str] | None,
    ) -> Launch | None:
        """The launch of a run of `ids`, with the view its admission will (or, beside
        others on several GPUs, would now) give it; None where nothing starts ahead."""
        if not self.on:
            return None
        device = self.admission.ahead_device(strict=strict, files=files, key=files[-1])
        return evidence_launch(
            self.rootdir, ids, files, gpu=self.views[device], label="ahead", env=env
        )
