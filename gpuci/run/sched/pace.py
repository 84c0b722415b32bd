"""The plain run's pace: how much the screens beside the suite interpreter slow it.

The suite interpreter is the user's plain pytest run, the floor of a check's cost; the
screens beside it may take only what it leaves. Its pace is told against its own tests'
seconds in earlier checks (pytest's durations, summed per file: the durations file's
`suite` times, the fastest seen, `gpuci.run.disk.durations.suite_pace`; else the suite's
run.json of the check this one replaced in OUT), never against wall clocks that hold
start-up or collection:
- while it runs, how far behind that pace the tests it finished ran (`behind`: a long file
  tells before it ends), and so how many of their slots the screens beside it may fill
  (`slots_beside`);
- where its heavy files fall from where its journal says it is (`stretch_ahead`), which a
  heavy parallel file waits out where that costs the screens nothing (`defer_heavy`);
- once it ended, what it took against that pace (`slowed`), recorded in the suite's
  run.json (`pace`) and told in the verdict and the report.
An earlier check slowed by its screens too is a reference slower than plain pytest: the
record names its reference, and says "against", never "than plain pytest".
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuci.formats import read_mode_run
from gpuci.model import GpuciError, Interpreter, Mode, TestResult
from gpuci.run.disk.durations import is_durations_file, read_durations_file

# behind by more than this, the screens beside it give up slots (issue 54: within 10 %)
SLACK = 1.1
# what its earlier pace must have taken of the finished files before a ratio says anything
# (a few short files' noise is not a pace)
MIN_EXPECTED_S = 2.0
# a file at this many times the files' mean (seconds, or peak device memory) is heavy
HEAVY = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PlainPace:
    """Per test file, the seconds the suite interpreter's tests took in an earlier check."""

    seconds: Mapping[str, float]
    reference: str  # where they come from, in words: the record names it


def earlier_pace(durations: Path | None, history: Path) -> PlainPace | None:
    """The suite's earlier pace: `--durations`'s `suite` times, else the suite's run.json in
    `history` (the check this one replaced); None where neither holds them."""
    if durations is not None and is_durations_file(durations):
        with contextlib.suppress(GpuciError):  # the plan names what is wrong with it
            earlier = read_durations_file(durations)
            seconds = earlier.seconds.get(Mode.SUITE, {})
            if seconds:
                check = f" (check {earlier.run_id})" if earlier.run_id else ""
                return PlainPace(seconds=seconds, reference=f"{durations}{check}")
    with contextlib.suppress(GpuciError, OSError):
        run = read_mode_run(history / Mode.SUITE.value / "run.json")
        seconds = seconds_per_file(run.tests)
        if seconds:
            check = f" (check {run.run_id})" if run.run_id else ""
            return PlainPace(seconds=seconds, reference=f"the earlier check in OUT{check}")
    return None


def seconds_per_file(tests: Iterable[TestResult]) -> dict[str, float]:
    """pytest's durations of the tests that ran, summed per file."""
    found: dict[str, float] = {}
    for test in tests:
        if not test.inferred:
            found[test.file] = found.get(test.file, 0.0) + test.duration
    return {file: round(seconds, 3) for file, seconds in found.items()}


def behind(pace: PlainPace, done: Mapping[str, tuple[float, float]]) -> float | None:
    """How many times its earlier seconds the suite interpreter took over what it has `done`
    (file -> its finished tests' seconds now, and the share of the file's tests they are:
    a long file tells its pace before it ends); None until that was MIN_EXPECTED_S before."""
    shared = {f: (s, share) for f, (s, share) in done.items() if f in pace.seconds}
    expected = sum(pace.seconds[f] * share for f, (_, share) in shared.items())
    if expected < MIN_EXPECTED_S:
        return None
    return sum(s for s, _ in shared.values()) / expected


def slots_beside(slots: int, ratio: float | None) -> int:
    """How many of the `slots` beside the suite interpreter may run files while it runs at
    `ratio` of its earlier pace: all within SLACK; fewer the further behind (at least one,
    so that the screens go on)."""
    if ratio is None or ratio <= SLACK:
        return slots
    return max(1, min(slots, math.floor(slots / ratio)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Stretch:
    """The suite interpreter's heavy files ahead of it, by its earlier pace, in seconds from
    now; and when it likely ends."""

    windows: tuple[tuple[float, float], ...]
    end: float


def heavy(values: Mapping[str, float]) -> set[str]:
    """The files whose value (seconds, or device memory) is at least HEAVY times the mean
    of the files that have one; none among fewer than two."""
    known = {f: v for f, v in values.items() if v > 0}
    if len(known) < 2:
        return set()
    mean = sum(known.values()) / len(known)
    return {f for f, v in known.items() if v >= HEAVY * mean}


def stretch_ahead(
    pace: PlainPace, order: Sequence[str], current: str | None, spent: float
) -> Stretch:
    """Where the suite interpreter's heavy files fall from now: it runs `order`'s files one
    after the other at its earlier `pace`, `spent` seconds into `current` (None: before its
    first test)."""
    suite_heavy = heavy({f: pace.seconds.get(f, 0.0) for f in order})
    ahead = order[order.index(current) :] if current in order else order
    windows: list[tuple[float, float]] = []
    now = 0.0
    for file in ahead:
        left = max(0.0, pace.seconds.get(file, 0.0) - (spent if file == current else 0.0))
        if file in suite_heavy and left > 0:
            windows.append((now, now + left))
        now += left
    return Stretch(windows=tuple(windows), end=now)


def defer_heavy(seconds: float, stretch: Stretch) -> bool:
    """Whether a heavy file of `seconds`, started now, would run beside one of the suite's
    heavy files and, started after them, would still end before the suite does: the plan
    can keep the two apart at no cost to the check's end."""
    overlapped = [end for start, end in stretch.windows if start < seconds]
    return bool(overlapped) and max(overlapped) + seconds <= stretch.end


def slowed(
    pace: PlainPace, tests: Iterable[TestResult], interpreters: Iterable[Interpreter] = ()
) -> dict[str, Any]:
    """run.json's `pace` of the suite: its tests' seconds against its earlier ones, over the
    files both ran; and the seconds its `interpreters` ran after their collection, of which
    its tests took `tests_s` (the rest: pytest's reports, gpuci's journal and ledger, and
    waiting for a core); {} where the two checks share no file."""
    tests = list(tests)
    now = seconds_per_file(tests)
    shared = sorted(now.keys() & pace.seconds.keys())
    expected = sum(pace.seconds[f] for f in shared)
    if not shared or expected <= 0:
        return {}
    took = sum(now[f] for f in shared)
    # a held interpreter collected before the screens began (its clock's 0): it runs from 0
    running = sum(i.end - max(i.start + (i.startup_s or 0.0), 0.0) for i in interpreters)
    return {
        "reference": pace.reference,
        "files": len(shared),
        "expected_s": round(expected, 3),
        "took_s": round(took, 3),
        "ratio": round(took / expected, 3),
        "running_s": round(running, 3),
        "tests_s": round(sum(now.values()), 3),
    }


def pace_line(pace: Mapping[str, Any]) -> str:
    """The record told in one line (the terminal summary, the report)."""
    ratio = float(pace.get("ratio", 0.0))
    change = f"{(ratio - 1) * 100:+.0f} %"
    line = (
        f"the suite interpreter (the plain run) took {float(pace.get('took_s', 0.0)):.1f} s"
        f" in its tests against {float(pace.get('expected_s', 0.0)):.1f} s in"
        f" {pace.get('reference', '?')} ({change}, {pace.get('files', 0)} files)"
    )
    running, tests = pace.get("running_s"), pace.get("tests_s")
    if isinstance(running, int | float) and isinstance(tests, int | float) and running:
        line += (
            f"; it ran {running:.1f} s after its collection, {max(running - tests, 0.0):.1f} s"
            " of them between its tests (pytest's reports, gpuci's journal and ledger,"
            " waiting for a core)"
        )
    return line
