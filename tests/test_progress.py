"""Progress: the estimate counts interpreter start-up, measured from the journal; what -q,
the default and -v print of a file's end, an evidence line and a mode's end."""

from __future__ import annotations

import io
import re
import time
from dataclasses import replace

from gpuci.model import FileRun, FileStatus, Interpreter, Mode, ModeRun, Outcome, TestResult
from gpuci.run.proc.journal import startup_of
from gpuci.terminal import Terminal, using

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


def failing(file: str) -> FileRun:
    return replace(finished(file, 0.5), status=FileStatus.FAILED)


RESULTS = [
    TestResult(id="test_0.py::test_ok", file="test_0.py", outcome=Outcome.PASSED),
    TestResult(id="test_0.py::test_bad", file="test_0.py", outcome=Outcome.FAILED),
    TestResult(id="test_0.py::test_gone", file="test_0.py", outcome=Outcome.CRASHED),
]


def said_at(verbosity: int, color: str = "no") -> list[str]:
    """What a failing file's end and its mode's end print at `verbosity`."""
    from gpuci.run.sched.progress import Progress, say

    out = io.StringIO()
    with using(Terminal(verbosity=verbosity, color=color)):
        progress = Progress(out, FILES, 1, {}, time.monotonic())
        progress.file_done(failing(FILES[0]), RESULTS)
        say(out, "culprits: searching for 1 victim(s)")  # an evidence line
        progress.mode_done(ModeRun(mode=Mode.PARALLEL, command=(), rootdir=".", workers=1,
                                   files=(failing(FILES[0]),), tests=tuple(RESULTS)))  # fmt: skip
    return out.getvalue().splitlines()


def test_each_verbosity_prints_what_its_help_says() -> None:
    default = said_at(0)
    assert re.fullmatch(
        r"gpuci: \[1/5\] test_0\.py: 1 failed, 1 passed, 1 crashed \(0\.5s\) \[failed\] .*",
        default[0],
    )
    assert default[1:] == [
        "gpuci: culprits: searching for 1 victim(s)",
        "gpuci: parallel: 1 failed, 1 passed, 1 crashed in 0.0s",
    ]
    # -q: what ended, not each file nor each evidence run
    assert said_at(-1) == ["gpuci: parallel: 1 failed, 1 passed, 1 crashed in 0.0s"]
    # -v: the file's tests that did not pass, beneath its line
    verbose = said_at(1)
    assert verbose[0] == default[0]
    assert verbose[1:3] == [
        "gpuci:     test_0.py::test_bad failed",
        "gpuci:     test_0.py::test_gone crashed",
    ]
    assert verbose[3:] == default[1:]


def test_a_files_failure_is_red_only_where_colour_is_asked() -> None:
    assert "\x1b" not in "".join(said_at(1))
    painted = said_at(1, color="yes")
    assert "\x1b[31m[failed]\x1b[0m" in painted[0]
    assert painted[1] == "gpuci:     test_0.py::test_bad \x1b[31mfailed\x1b[0m"
