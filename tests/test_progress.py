"""Progress: the estimate counts interpreter start-up, measured from the journal."""

from __future__ import annotations

import io
import re
import time

from gpuci.model import FileRun, FileStatus, Interpreter
from gpuci.run.proc.journal import startup_of

FILES = [f"test_{i}.py" for i in range(5)]


def finished(file: str, startup: float) -> FileRun:
    """A file that took half a second to start and ran its tests in 10 ms."""
    interpreter = Interpreter(exit_code=0, start=0.0, end=startup + 0.01, log="", startup_s=startup)
    return FileRun(
        file=file,
        status=FileStatus.PASSED,
        slot=0,
        gpu=None,
        start=0.0,
        end=startup + 0.01,
        interpreters=(interpreter,),
        tests=1,
    )


def eta_said(out: io.StringIO) -> list[float]:
    return [float(x) for x in re.findall(r"~(\d+)s left", out.getvalue())]


def test_tests_times_alone_no_longer_say_nothing_is_left() -> None:
    """Per-file test times (10 ms) leave start-up out: once a file has measured its
    start-up (3 s), the four files left are 4 x 3 s over 2 slots, not ~0 s."""
    from gpuci.run.sched.progress import Progress

    out = io.StringIO()
    estimates = dict.fromkeys(FILES, 0.01)
    progress = Progress(out, FILES, 2, estimates, time.monotonic(), with_startup=False)
    progress.file_done(finished(FILES[0], 3.0), [])
    assert eta_said(out) == [6.0]
    # estimates that include start-up (an earlier run's file times) are not counted twice
    out = io.StringIO()
    progress = Progress(out, FILES, 2, dict.fromkeys(FILES, 3.0), time.monotonic())
    progress.file_done(finished(FILES[0], 3.0), [])
    assert eta_said(out) == [6.0]


def test_startup_is_measured_from_the_first_stamped_event() -> None:
    events = [{"e": "collect-error", "id": "x"}, {"e": "collected", "ids": [], "t": 101.5}]
    assert startup_of(events, 100.0) == 1.5
    assert startup_of([{"e": "start", "id": "a"}], 100.0) is None  # an unstamped journal
    assert startup_of([{"e": "collected", "t": 99.0}], 100.0) == 0.0  # clocks never go back
