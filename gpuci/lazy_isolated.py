"""Lazy isolated: `gpuci check`'s isolated pass after its screens, for the files that did
not pass in them.

Only a parallel pass stands in for isolated (the files it passed are inferred from it);
a file whose failures were alike in every screen is not re-run (its tests' alone-runs
decide). The rest run side by side in the check's slots, admitted by device memory, and
a file that did not pass there runs again alone, its strict run the one that counts. A
file that failed fresh in its own order in parallel runs alone from the start: it will
likely fail again, and would need that run anyway (measured on an H100: side by side first
made isolated 21 s instead of 15 s on examples/gpu_polluted, where six of eight files
failed again; a file that ran the device out of memory needs the whole GPU).

Its first files start while the screens go on (`IsolatedAhead`): a file that finished
every lazy screen and did not pass in one will likely run here, and the suite screen, the
longest, leaves cores idle meanwhile.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

from gpuci.evidence.fingerprints import files_failing_alike
from gpuci.model import FileRun, FileStatus, Mode, ModeRun
from gpuci.run.proc.discover import Discovery
from gpuci.run.proc.held import WORTH_HIDING_S
from gpuci.run.sched.beside import hold_isolated_file
from gpuci.run.sched.options import ModeOptions
from gpuci.run.sched.plan import files_to_confirm
from gpuci.run.sched.plan_mode import run_one_mode, say
from gpuci.run.sched.pool import ahead_count

# a lazy isolated pass after these runs only the files that did not pass in them
CONFIRMED_BY = (Mode.PARALLEL, Mode.THREADS)
# ... but only a parallel pass stands in for isolated: a pass in threads does not (fresh
# worker threads see no earlier test's thread-local state; pytest-run-parallel 0.10 passes
# a test that fails by a warning), so threads alone never makes isolated lazy
INFERRED_FROM = Mode.PARALLEL
# a file whose failures were alike in each of these is not re-run in isolated at all
SCREENS = (Mode.SUITE, Mode.PARALLEL, Mode.THREADS)


def lazy_isolated(
    opts: ModeOptions,
    discovery: Discovery,
    runs: dict[Mode, ModeRun],
    lazy: list[Mode],
    prior: ModeRun | None,
) -> ModeRun:
    """Isolated for the files that did not pass in `lazy`, but those whose failures were
    alike in every screen (their alone-runs decide); the rest inferred. Side by side, a
    file that does not pass there confirmed alone (`gpuci.run.sched.one_mode`)."""
    screens = [runs[m] for m in SCREENS if m in runs]
    unconfirmed = files_to_confirm(*(runs[m] for m in lazy))
    alike = files_failing_alike(screens) & unconfirmed
    if alike:
        where = ", ".join(r.mode.value for r in screens)
        say(
            f"isolated: {len(alike)} file(s) failed alike in every screen ({where}):"
            " not re-run, their tests' alone-runs decide"
        )
    return run_one_mode(
        opts,
        Mode.ISOLATED,
        discovery,
        only=unconfirmed - alike,
        inferred_from=runs[INFERRED_FROM],
        resume=prior,
        beside=True,
        # a file that failed fresh in its own order in parallel will likely fail again (one
        # that ran the device out of memory would need the whole GPU beside others)
        alone_first=frozenset(files_to_confirm(runs[Mode.PARALLEL]))
        if Mode.PARALLEL in lazy
        else frozenset(),
    )


class IsolatedAhead:
    """The lazy isolated pass's first files, started while the screens go on: a file that
    finished every one of the `lazy` screens and did not pass in one (the isolated pass
    will likely run it: unless its failures were alike in every screen), once its screens'
    interpreters showed a start-up worth hiding; no more than the pass keeps started ahead
    itself. On the H100 a CuPy section's `test_init.py` ended its parallel run at 5 s of
    the suite screen's 34, and its isolated run then started cold (3.2 s). The pass takes
    each where its command and environment match (`gpuci.run.proc.held.take_file`); one
    not taken is killed with the check's held interpreters."""

    def __init__(self, options: ModeOptions, rootdir: Path, lazy: Sequence[Mode]) -> None:
        self.options = options
        self.rootdir = rootdir
        self.lazy = frozenset(lazy)
        self.limit = ahead_count(1, os.cpu_count() or 1)
        self.finished: dict[str, set[Mode]] = {}
        self.failed: set[str] = set()
        self.slowest = 0.0  # the slowest start-up an interpreter of the screens showed
        self.held = 0
        self._lock = threading.Lock()

    def file_done(self, mode: Mode, file_run: FileRun) -> None:
        """A screen's file ended: held for isolated where it will likely run there."""
        if mode not in self.lazy or file_run.status is FileStatus.NOT_RUN:
            return
        file = file_run.file
        with self._lock:
            self.finished.setdefault(file, set()).add(mode)
            if file_run.status is not FileStatus.PASSED:
                self.failed.add(file)
            shown = [i.startup_s or 0.0 for i in file_run.interpreters if not i.ahead]
            self.slowest = max([self.slowest, *shown])
            ready = (
                file in self.failed
                and self.finished[file] >= self.lazy
                and self.slowest >= WORTH_HIDING_S
                and self.held < self.limit
            )
            self.held += ready
        if ready:
            hold_isolated_file(self.options, self.rootdir, file)
