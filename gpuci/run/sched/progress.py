"""Progress: one quiet line per finished file, and a summary when a mode ends; under -q
only the summaries and warnings, under -v each file's tests that did not pass too."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TextIO

from gpuci.model import (
    FileRun,
    FileStatus,
    Mode,
    ModeRun,
    Outcome,
    TestResult,
    printable,
    unit_of,
)
from gpuci.run.proc.strays import run_lines
from gpuci.run.sched.plan import Schedule
from gpuci.terminal import QUIET, current


def say(progress: TextIO, text: str, *, level: int = 0) -> None:
    """One line of gpuci's progress on `progress`, made printable (test ids are untrusted),
    where the command's verbosity shows `level` (QUIET: under -q too; 0: not under -q)."""
    if current().shows(level):
        print(printable(f"gpuci: {text}"), file=progress, flush=True)


SKIP_REASONS_SHOWN = 3
# pytest's own words (its summary line's, in its order) where they say more than the
# outcome, in place; then what only gpuci can say
COUNT_ORDER = (
    "failed",
    "passed",
    "skipped",
    "xfailed",
    "xpassed",
    "error",
    Outcome.CRASHED.value,
    Outcome.TIMED_OUT.value,
    Outcome.NOT_RUN.value,
)


def count_tests(tests: Sequence[TestResult]) -> str:
    """`1 failed, 3 passed, 1 xfailed, 2 errors`: as pytest's summary line counts them (a
    failure and its teardown error are two; a file that could not be collected is an
    error, one that skipped itself a skip), and what pytest cannot say (crashed...)."""
    counts: Counter[str] = Counter()
    for test in tests:
        counts.update(test.counted or (test.outcome.value,))
    return say_counts(counts)


def say_counts(counts: Mapping[str, int]) -> str:
    """Counts by pytest's words as its summary line says them, in its order."""
    words = [w for w in COUNT_ORDER if counts.get(w)]
    words += sorted(w for w in counts if counts[w] and w not in COUNT_ORDER)
    plural = {"error": "errors"}  # as pytest says it
    return (
        ", ".join(f"{counts[w]} {plural.get(w, w) if counts[w] != 1 else w}" for w in words)
        or "no tests"
    )


class Progress:
    """One quiet line per finished unit: counts, failures, elapsed time, an estimate.

    The estimate counts interpreter start-up: what the finished units' interpreters took
    from their start to their first journal event, on top of per-file test times (which
    leave it out). Without that, a pass of short files read `~0s left` from its start.
    """

    def __init__(
        self,
        out: TextIO,
        units: Sequence[str],
        workers: int,
        estimates: Mapping[str, float],
        zero: float,
        *,
        with_startup: bool = True,
    ) -> None:
        self.out = out
        self.total = len(units) or 1
        self.workers = max(1, workers)
        self.estimates = {u: estimates[u] for u in units if u in estimates}
        self.with_startup = with_startup  # whether the estimates include start-up already
        self.zero = zero
        self.done = 0
        self.startups: list[float] = []
        self.left_s = sum(self.estimates.values())
        self.lock = threading.Lock()

    @classmethod
    def for_mode(
        cls,
        out: TextIO,
        mode: Mode,
        schedule: Schedule,
        estimates: Mapping[str, float],
        zero: float,
        *,
        with_startup: bool = True,
    ) -> Progress:
        """The progress of one mode run on its own."""
        unit = unit_of(mode)
        units = [unit] if unit is not None else list(schedule.files)
        if unit is not None:  # its estimate: the suite's files, one after the other
            estimates = {unit: sum(estimates.get(f, 0.0) for f in schedule.files)}
        return cls(out, units, schedule.workers, estimates, zero, with_startup=with_startup)

    def eta(self, elapsed: float) -> float:
        """Seconds left: the estimates of the units left (with the start-up measured so far)
        over the slots they can use; without estimates, the pace so far."""
        left = self.total - self.done
        if left <= 0:
            return 0.0
        if self.estimates and self.left_s > 0:
            startup = sum(self.startups) / len(self.startups) if self.startups else 0.0
            left_s = self.left_s + (0.0 if self.with_startup else startup * left)
            return left_s / min(self.workers, left)
        return elapsed / self.done * left if self.done else 0.0

    def add(self, units: int) -> None:
        """`units` more to run than planned (files run again)."""
        with self.lock:
            self.total += units

    def file_done(
        self, file_run: FileRun, tests: list[TestResult], *, unit: str = "", label: str = ""
    ) -> None:
        """Say that a unit finished: `unit` keys its estimate (default: its file), `label`
        goes before its name (the mode, when several run at once)."""
        terminal = current()
        with self.lock:
            self.done += 1
            self.startups += [i.startup_s for i in file_run.interpreters if i.startup_s]
            self.left_s -= self.estimates.get(unit or file_run.file, 0.0)
            if terminal.quiet:
                return
            said = count_tests(tests)
            elapsed = time.monotonic() - self.zero
            eta = self.eta(elapsed)
            flag = ""
            if file_run.status is not FileStatus.PASSED:
                flag = " " + terminal.paint(f"[{file_run.status.value}]", "red", self.out)
            width = len(str(self.total))
            name = printable(f"{label} {file_run.file}" if label else file_run.file)
            print(
                f"gpuci: [{self.done:>{width}}/{self.total}] {name}: {said}"
                f" ({file_run.duration:.1f}s){flag}  elapsed {elapsed:.0f}s, ~{eta:.0f}s left",
                file=self.out,
                flush=True,
            )
            if terminal.verbose:  # as pytest -v names each test: here, those that did not pass
                for test in tests:
                    if test.outcome not in (Outcome.PASSED, Outcome.SKIPPED):
                        outcome = terminal.paint(test.outcome.value, "red", self.out)
                        line = printable(f"gpuci:     {test.id} ") + outcome
                        print(line, file=self.out, flush=True)

    def mode_done(self, run: ModeRun) -> None:
        """A mode's counts, its leftovers and its commonest skip reasons (under -q too)."""
        said = count_tests(run.tests)
        say(self.out, f"{run.mode.value}: {said} in {run.wall_s:.1f}s", level=QUIET)
        for line in run_lines(run):  # a leftover is an isolation bug of its own: say it
            say(self.out, f"warning: {line}", level=QUIET)
        # the most common skip reasons: a suite that skipped for want of a GPU says so
        reasons = Counter(
            t.message for t in run.tests if t.outcome is Outcome.SKIPPED and not t.counted
        )
        for reason, n in reasons.most_common(SKIP_REASONS_SHOWN):
            say(self.out, f"  {n} skipped: {printable(reason) or '(no reason given)'}", level=QUIET)
