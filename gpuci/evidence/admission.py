"""Admission: how many evidence interpreters run at once, and which may share the GPUs.

Up to the check's slots run at once; a strict run has nothing beside it on its GPUs; and
no more run together than a GPU holds by their files' peaks (the screens', or one measured
alone). With several GPUs a run beside others starts on the GPU with the most memory not
kept (its view rotated to start there, every GPU still visible). A strict run of files
that held memory on one GPU only in the screens (`narrow`) keeps one GPU to itself: strict
runs of other files run on the other GPUs meanwhile, and nothing that may reach further
runs beside them. Every strict run of a file (its key: the victim's file) sees the view
its first one had, which the commands that gpuci prints for it carry (`lanes`); any other
strict run has every GPU to itself and sees them as the serial interpreters do.
A file that ran out of device memory in a screen has no peak to go by (it stopped short of
what it needs): it keeps the whole GPU until a run of it alone measures one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from gpuci.run.proc.gpumem import with_margin

# an interpreter whose start-up takes this long (PyTorch's common_utils' can) is paid
# once per wave: the evidence runs side by side up to the machine's cores, not the slots
EXPENSIVE_START_S = 5.0


def evidence_slots(workers: int, start_s: float, cpus: int | None) -> int:
    """How many evidence interpreters may run at once: the check's slots (`workers`), or
    where one interpreter's start-up takes `EXPENSIVE_START_S` or more, every core but
    one (the device's memory admits them as ever, by their files' peaks)."""
    if start_s < EXPENSIVE_START_S or not cpus:
        return max(1, workers)
    return max(1, workers, cpus - 1)


@dataclass(slots=True)
class _Flight:
    """One admitted run (or pair): whether another overlapped it, the device memory kept."""

    size: int
    need_mib: int = 0
    beside: bool = False
    device: int = 0  # the GPU it runs on first (an index into the admission's `devices`)
    narrow: bool = False  # its files held memory on their first GPU only (in the screens)
    lane: bool = False  # a strict run with its GPU, not every GPU, to itself


@dataclass(slots=True)
class Admission:
    """How many evidence interpreters run at once: up to `slots`, none beside a strict one,
    and no more together than the GPU holds by their files' peaks in the screens.

    A strict run waits until nothing runs, and while it waits nothing new starts (so it is
    never starved); a run that overlapped another is marked `beside`. Memory is kept for a
    run from its admission (a free-memory reading would let two big runs that start at the
    same moment both in).
    """

    slots: int = 1
    capacity_mib: int | None = None  # each GPU's memory; None: not known, not checked
    devices: int = 1  # the GPUs a run may start on first: runs beside others spread over them
    peaks: dict[str, int] = field(default_factory=dict)  # by file, from the screens
    most: int = 0  # the most interpreters that ran at once
    beside: int = 0  # runs that had another beside them
    losers: int = 0  # speculated runs whose answer the search did not need (never counted)
    killed: int = 0  # of them, those still running when it knew: killed
    unmeasured: set[str] = field(default_factory=set)  # files that keep the whole GPU
    narrow: set[str] = field(default_factory=set)  # files that held memory on one GPU only
    lanes: dict[str, int] = field(default_factory=dict)  # key -> the GPU its strict runs see
    _flights: list[_Flight] = field(default_factory=list)
    _strict: int = 0  # strict runs with every GPU to themselves, waiting or running
    _reserved: dict[int, int] = field(default_factory=dict)  # GPU -> strict runs waiting for it
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def need(self, files: Sequence[str]) -> int:
        """The device memory to keep for an interpreter of `files` (0: not known)."""
        peak = max((self.peaks.get(f, 0) for f in files), default=0)
        return round(with_margin(peak)) if peak else 0

    def is_narrow(self, files: Sequence[str]) -> bool:
        """Whether a run of `files` stays on its first GPU (each held memory on one only)."""
        return self.devices > 1 and bool(files) and all(f in self.narrow for f in files)

    def _fits(
        self, size: int, need_mib: int, *, narrow: bool = False, prefer: int | None = None
    ) -> int | None:
        """The GPU a run of `need_mib` may start on now (`prefer`, where its interpreter
        started ahead on it and it holds the run; else the one with the most memory not
        kept, then the fewest runs, not kept by a strict run), or None: no slot, or no GPU
        holds it beside what runs there. One that may reach every GPU waits while a strict
        run keeps one."""
        if self._strict or self._running() + size > max(self.slots, size):
            return None
        laned = {f.device for f in self._flights if f.lane} | {
            d for d, n in self._reserved.items() if n
        }
        if laned and not narrow:
            return None
        kept, runs = self._per_device()
        free = [d for d in range(len(kept)) if d not in laned]
        if not free:
            return None

        def holds(device: int) -> bool:
            return (
                not self._flights
                or self.capacity_mib is None
                or kept[device] + need_mib <= self.capacity_mib
            )

        if prefer in free and holds(prefer):
            return prefer
        device = min(free, key=lambda d: (kept[d], runs[d], d))
        return device if holds(device) else None

    def _lane_of(self, key: str) -> int:
        """The GPU a strict run of `key` keeps: its earlier strict runs', else the one with
        the fewest runs on it or waiting for it (then the least memory kept)."""
        if key not in self.lanes:
            kept, runs = self._per_device()
            busy = [runs[d] + self._reserved.get(d, 0) for d in range(len(runs))]
            self.lanes[key] = min(range(len(runs)), key=lambda d: (busy[d], kept[d], d))
        return self.lanes[key]

    def _per_device(self) -> tuple[list[int], list[int]]:
        """Per GPU: the device memory kept for the runs on it, and how many run there."""
        kept, runs = [0] * max(1, self.devices), [0] * max(1, self.devices)
        for flight in self._flights:
            kept[flight.device] += flight.need_mib
            runs[flight.device] += 1
        return kept, runs

    def _lane_free(self, device: int) -> bool:
        """Whether a strict run may keep `device` now: nothing runs on it, nothing that may
        reach every GPU runs anywhere, no strict run waits for every GPU."""
        return (
            not self._strict
            and self._running() < max(1, self.slots)
            and all(f.device != device and f.narrow for f in self._flights)
        )

    def ahead_device(self, *, strict: bool, files: Sequence[str], key: str) -> int:
        """The GPU a run of `files` will start on (an interpreter started ahead for it sees
        that GPU's view): a strict run's, the only GPU, or for a run beside others on
        several GPUs the one it would start on now, which its admission prefers
        (`admitted`'s `prefer`) where the memory kept then still holds it."""
        with self._changed:
            if strict and key and self.is_narrow(files):
                return self._lane_of(key)
            if strict:
                return self.lanes.get(key, 0) if key else 0
            # a run beside others: the GPU it would start on now (it may take another then)
            kept, runs = self._per_device()
            return min(range(len(kept)), key=lambda d: (kept[d], runs[d], d))

    def would_wait(self, *, strict: bool, need_mib: int, files: Sequence[str], key: str) -> bool:
        """Whether a run asking now waits for its turn (what `admitted` would do)."""
        with self._changed:
            narrow = self.is_narrow(files)
            if strict and narrow and key:
                return not self._lane_free(self._lane_of(key))
            if strict:
                return bool(self._flights)
            return self._fits(1, need_mib, narrow=narrow) is None

    @contextlib.contextmanager
    def admitted(
        self,
        *,
        strict: bool,
        size: int = 1,
        need_mib: int = 0,
        files: Sequence[str] = (),
        key: str = "",
        prefer: int | None = None,
    ) -> Iterator[_Flight]:
        """Hold one of the slots for the run inside (a `strict` one: its GPU, or all of
        them, to itself; `key`: whose strict runs see one view, the victim's file; `prefer`:
        the GPU its interpreter started ahead on, where it fits there)."""
        narrow = size == 1 and self.is_narrow(files)
        flight = _Flight(size, need_mib, narrow=narrow)
        with self._changed:
            if strict and narrow and key:  # its GPU to itself, strict runs of others beside
                flight.device, flight.lane = self._lane_of(key), True
                self._reserved[flight.device] = self._reserved.get(flight.device, 0) + 1
                self._changed.wait_for(lambda: self._lane_free(flight.device))
                self._reserved[flight.device] -= 1
            elif strict:  # every GPU to itself, from its key's GPU (the serial view's first)
                flight.device = self.lanes.setdefault(key, 0) if key else 0
                self._strict += 1
                self._changed.wait_for(lambda: not self._flights)
            else:

                def fits() -> int | None:
                    return self._fits(size, need_mib, narrow=narrow, prefer=prefer)

                self._changed.wait_for(lambda: fits() is not None)
                flight.device = fits() or 0
            for other in self._flights:  # strict runs on GPUs of their own are not beside
                if not (flight.lane and other.lane):
                    flight.beside = other.beside = True
            self._flights.append(flight)
            self.most = max(self.most, self._running())
        try:
            yield flight
        finally:
            with self._changed:
                self._flights.remove(flight)
                self._strict -= strict and not flight.lane
                self.beside += flight.size if flight.beside else 0
                self._changed.notify_all()

    def ran_out(self, files: Iterable[str]) -> None:
        """`files` ran out of device memory in a screen: what they held there is not what
        they need, so each keeps the whole GPU until a run of it alone is measured."""
        if self.capacity_mib is None:
            return
        with self._changed:
            for file in files:
                self.unmeasured.add(file)
                self.peaks[file] = self.capacity_mib

    def learn(self, file: str, peak_mib: int | None) -> None:
        """A run of `file` alone peaked at `peak_mib`: a screen's run that failed short of
        memory (beside a hog) held less than the file needs."""
        if peak_mib:
            with self._changed:
                if file in self.unmeasured:  # the whole GPU stood in for it: replaced
                    self.unmeasured.discard(file)
                    self.peaks[file] = peak_mib
                else:
                    self.peaks[file] = max(peak_mib, self.peaks.get(file, 0))

    def lost(self, *, killed: bool) -> None:
        """A speculated run's answer was not needed (`killed`: it was ended for it)."""
        with self._changed:
            self.losers += 1
            self.killed += killed

    def to_json(self) -> dict[str, int]:
        """evidence.json's `concurrency`."""
        lost = {"losers": self.losers, "killed": self.killed} if self.losers else {}
        return {"slots": self.slots, "most_at_once": self.most, "beside": self.beside, **lost}

    def idle(self) -> int:
        """How many slots no run holds now (none while a strict run waits or runs)."""
        with self._changed:
            return 0 if self._strict else max(0, self.slots - self._running())

    def running(self) -> int:
        """How many interpreters run now."""
        with self._changed:
            return self._running()

    def _running(self) -> int:
        return sum(f.size for f in self._flights)
