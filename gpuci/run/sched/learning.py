"""What the screens learn as they run: the suite interpreter's time in each file, for the
order of the parallel (and threads) files that have not started yet.

Where no earlier check timed the files, they start by their weight (their tests, a test
that compiles a kernel counted as many: `gpuci.run.sched.compiles`), and a file long for a
reason its source does not show starts late and ends the screens long after the suite.
The suite interpreter runs every file beside them from the screens' start, in its own
order: a file it found long starts next, and a file it ran through replaces its weight
with its measured time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuci.run.proc.discover import file_of
from gpuci.run.sched.pace import PlainPace, defer_heavy, heavy, stretch_ahead
from gpuci.run.sched.plan import estimate_durations, fit_startup_and_rate


class SuiteClock:
    """The suite interpreter's seconds in each file so far, from its journal's events as
    they are read (when they are read stands for when they were written: the parent reads
    the journal every quarter second or so)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = {}
        self._finished: dict[str, int] = {}
        self._file: str | None = None  # the file its running test is in
        self._since = 0.0
        self._took: dict[str, float] = {}  # each test it passed: its seconds
        self._spent: dict[str, float] = {}  # each file: its finished tests' seconds
        self._left: set[str] = set()  # the files it moved on from
        self.ended = False

    def observe(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Take the events the suite interpreter's journal gave since the last call."""
        now = self._clock()
        with self._lock:
            for event in events:
                kind = event.get("e")
                if kind == "start":
                    self._enter(file_of(str(event.get("id"))), now)
                elif kind == "finish":
                    file = file_of(str(event.get("id")))
                    self._finished[file] = self._finished.get(file, 0) + 1
                    seconds = event.get("duration")
                    if isinstance(seconds, int | float):
                        self._spent[file] = self._spent.get(file, 0.0) + float(seconds)
                        if event.get("outcome") == "passed":
                            self._took[str(event.get("id"))] = float(seconds)
                elif kind == "end":
                    self._enter(None, now)
                    self.ended = True

    def _enter(self, file: str | None, now: float) -> None:
        if file == self._file:
            return
        if self._file is not None:
            self._seconds[self._file] = self._seconds.get(self._file, 0.0) + now - self._since
            self._left.add(self._file)
        self._file, self._since = file, now

    def progress(self, counts: Mapping[str, int]) -> dict[str, tuple[float, float]]:
        """Each file it reached: its finished tests' seconds by pytest's own durations (what
        an earlier check's pace is in, `gpuci.run.sched.pace`), and the share of its tests
        (`counts`) they are: all of a file it moved on from."""
        with self._lock:
            found = {f: (self._spent.get(f, 0.0), 1.0) for f in self._left}
            file = self._file
            if file is not None and file not in self._left and counts.get(file):
                share = min(1.0, self._finished.get(file, 0) / counts[file])
                found[file] = (self._spent.get(file, 0.0), share)
            return found

    def where(self) -> tuple[str | None, float]:
        """The file it runs a test of now (None: none yet, or it ended), and its seconds
        in that file so far."""
        with self._lock:
            if self._file is None:
                return None, 0.0
            return self._file, self._seconds.get(self._file, 0.0) + self._clock() - self._since

    def left(self, file: str) -> bool:
        """Whether it ran `file` and moved on: its seconds there are measured whole."""
        with self._lock:
            return file in self._left and file != self._file

    def took(self, test_id: str) -> float | None:
        """The seconds the suite interpreter took to pass `test_id`; None: not (yet) passed."""
        with self._lock:
            return self._took.get(test_id)

    def work(self, file: str, tests: int) -> float | None:
        """The seconds `file`'s `tests` take in the suite interpreter: measured once it left
        the file, else what its tests so far took, as many times over as it has tests left
        to the one running; None before it started the file."""
        with self._lock:
            spent = self._seconds.get(file)
            if file != self._file:
                return spent
            spent = (spent or 0.0) + self._clock() - self._since
            begun = self._finished.get(file, 0) + 1  # the running test's time is in `spent`
            return spent * max(tests, begun) / begun


class LearnedOrder:
    """Chooses which file starts next: the longest by what is known at that moment (an
    earlier check's durations, this screen's finished files, the suite interpreter's time in
    each file); the planned order where nothing tells files apart. With the suite's earlier
    `pace`, a heavy file (by its seconds, or its peak device memory) waits while it would run
    beside the suite interpreter's heavy stretch and could still end before the suite does
    (`gpuci.run.sched.pace.defer_heavy`), where a light file can run meanwhile."""

    def __init__(
        self,
        planned: Sequence[str],
        durations: Mapping[str, float],
        counts: Mapping[str, int],
        suite: SuiteClock,
        *,
        pace: PlainPace | None = None,
        suite_order: Sequence[str] = (),  # the suite interpreter's files, in its order
        peaks: Mapping[str, int] | None = None,  # MiB per file, an earlier check's
        weights: Mapping[str, int] | None = None,  # `counts`, a kernel compile as many tests
    ) -> None:
        self._position = {f: i for i, f in enumerate(planned)}
        self._known = dict(durations)  # seconds, interpreter start-up included
        self._counts = counts
        self._weights = weights or counts
        self._suite = suite
        self._pace = pace
        self._suite_order = tuple(suite_order)
        self._heavy_by_memory = heavy({f: float(m) for f, m in (peaks or {}).items()})
        self._lock = threading.Lock()

    def finished(self, file: str, seconds: float) -> None:
        """A file of this screen ended after `seconds` (start-up included)."""
        with self._lock:
            self._known[file] = seconds

    def choose(self, remaining: Sequence[str]) -> str:
        """The file of `remaining` to start now."""
        seconds = self.seconds()
        if not seconds:  # numbers of tests order the files, not seconds
            return min(remaining, key=lambda f: self._position.get(f, len(self._position)))
        ranked = sorted(
            remaining,
            key=lambda f: (-seconds.get(f, 0.0), self._position.get(f, len(self._position))),
        )
        return self._beside_the_suite(ranked, seconds)

    def seconds(self) -> dict[str, float]:
        """Each planned file's seconds as known now; {} where nothing is known in seconds."""
        with self._lock:
            known = dict(self._known)
        seen = {f: w for f in self._position if (w := self._suite.work(f, self._tests(f)))}
        if not known and not seen:
            return {}
        weights = self._weights
        if known:
            estimates = estimate_durations(list(self._position), known, weights)
            startup, _ = fit_startup_and_rate(
                [(weights[f], s) for f, s in known.items() if f in weights]
            )
        else:
            # a first check's first seconds: the files the suite interpreter reached give
            # each test's seconds there, which the others' weights (tests, a kernel
            # compile as many) scale
            estimates = estimate_durations(list(self._position), seen, weights)
            startup = 0.0
        found = {}
        for file in self._position:
            planned = estimates.get(file, 0.0)
            work = seen.get(file)
            if work is None:
                found[file] = planned
            elif file not in known and self._suite.left(file):
                found[file] = startup + work  # measured whole: it replaces the guess
            else:  # an earlier time, or what it took so far scaled by the tests left
                found[file] = max(planned, startup + work)
        return found

    def _beside_the_suite(self, ranked: Sequence[str], seconds: Mapping[str, float]) -> str:
        """The first of `ranked`, unless it is heavy and waits for the suite's heavy
        stretch to pass: then the longest light one."""
        if self._pace is None or self._suite.ended or len(ranked) < 2:
            return ranked[0]
        heavy_files = heavy(seconds) | self._heavy_by_memory
        first = ranked[0]
        light = [f for f in ranked if f not in heavy_files]
        if first not in heavy_files or not light:
            return first
        current, spent = self._suite.where()
        stretch = stretch_ahead(self._pace, self._suite_order, current, spent)
        return light[0] if defer_heavy(seconds.get(first, 0.0), stretch) else first

    def _tests(self, file: str) -> int:
        return self._counts.get(file, 1)
