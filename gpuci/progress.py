"""Progress: one quiet line per finished file, and a summary when a mode ends."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import TextIO

from gpuci.model import FileRun, FileStatus, Mode, ModeRun, Outcome, TestResult, printable
from gpuci.plan import Schedule
from gpuci.strays import run_lines

SKIP_REASONS_SHOWN = 3
OUTCOME_WORDS = (
    Outcome.PASSED,
    Outcome.FAILED,
    Outcome.SKIPPED,
    Outcome.CRASHED,
    Outcome.TIMED_OUT,
    Outcome.NOT_RUN,
)


class Progress:
    """One quiet line per finished file: counts, failures, elapsed time, an estimate."""

    def __init__(
        self,
        out: TextIO,
        mode: Mode,
        schedule: Schedule,
        estimates: Mapping[str, float],
        zero: float,
    ) -> None:
        self.out = out
        self.total = 1 if mode is Mode.SUITE else len(schedule.files) or 1
        self.workers = schedule.workers
        self.estimates = estimates
        self.zero = zero
        self.done = 0
        self.left_s = sum(estimates.get(f, 0.0) for f in schedule.files)
        self.lock = threading.Lock()

    def file_done(self, file_run: FileRun, tests: list[TestResult]) -> None:
        with self.lock:
            self.done += 1
            counts = dict.fromkeys(OUTCOME_WORDS, 0)
            for test in tests:
                counts[test.outcome] += 1
            said = ", ".join(f"{n} {o.value}" for o, n in counts.items() if n) or "no tests"
            elapsed = time.monotonic() - self.zero
            self.left_s -= self.estimates.get(file_run.file, 0.0)
            if self.done >= self.total:
                eta = 0.0
            elif self.estimates and self.left_s > 0:
                eta = self.left_s / self.workers
            else:
                eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
            flag = "" if file_run.status in (FileStatus.PASSED,) else f" [{file_run.status.value}]"
            width = len(str(self.total))
            print(
                f"gpuci: [{self.done:>{width}}/{self.total}] {printable(file_run.file)}: {said}"
                f" ({file_run.duration:.1f}s){flag}  elapsed {elapsed:.0f}s, ~{eta:.0f}s left",
                file=self.out,
                flush=True,
            )

    def mode_done(self, run: ModeRun) -> None:
        counts = dict.fromkeys(OUTCOME_WORDS, 0)
        for test in run.tests:
            counts[test.outcome] += 1
        said = ", ".join(f"{n} {o.value}" for o, n in counts.items() if n) or "no tests"
        print(f"gpuci: {run.mode.value}: {said} in {run.wall_s:.1f}s", file=self.out, flush=True)
        for line in run_lines(run):  # a leftover is an isolation bug of its own: say it
            print(printable(f"gpuci: warning: {line}"), file=self.out, flush=True)
        # the most common skip reasons: a suite that skipped for want of a GPU says so
        reasons = Counter(t.message for t in run.tests if t.outcome is Outcome.SKIPPED)
        for reason, n in reasons.most_common(SKIP_REASONS_SHOWN):
            print(
                f"gpuci:   {n} skipped: {printable(reason) or '(no reason given)'}",
                file=self.out,
                flush=True,
            )
