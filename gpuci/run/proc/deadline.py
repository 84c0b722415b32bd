"""Deadline: when an interpreter counts as hung.

`--timeout` is the most time an interpreter may go without progress (no journal event). In
the screens the suite interpreter runs every test beside the others; where it ran the test
a parallel or threads interpreter is stuck in within a fraction of a second, waiting out the
whole timeout only makes the check as slow as the timeout (CuPy's threaded memory-pool tests
hang now and then when several interpreters run at once, plain pytest's too). A test is cut
after `HANG_FACTOR` times the suite's time for it, never sooner than `HANG_FLOOR_S`: it
times out there, as it would have later, and the evidence runs it alone as ever.

Before its first test an interpreter starts and collects: no test runs, and `--timeout` is
the most one test may run. There it is cut after `START_FLOOR_S` at the least: a start-up
that a loaded machine slowed (a CUDA library's import, thousands of parametrized ids) is
no hang, and cut at a short timeout it asked nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuci.model import UsageError

HANG_FLOOR_S = 30.0  # no test is cut sooner: start-up, a first CUDA call, a slow moment
HANG_FLOOR_ENV = "GPUCI_HANG_FLOOR_S"  # another floor, in seconds; 0 turns the cut off
HANG_FACTOR = 20.0  # times the suite interpreter's time for the test
START_FLOOR_S = 30.0  # before the first test: start-up and collection are cut no sooner

# a test's id -> (the seconds after which it counts as hung, why), or None: no knowledge
HangLimit = Callable[[str], "tuple[float, str] | None"]


def hang_limit_of(
    durations: Callable[[str], float | None], environ: Mapping[str, str]
) -> HangLimit | None:
    """The hang limit of a test that took `durations(id)` seconds in the suite interpreter
    (None where `GPUCI_HANG_FLOOR_S` is 0: only the timeout cuts)."""
    text = environ.get(HANG_FLOOR_ENV, "")
    try:
        floor = float(text) if text else HANG_FLOOR_S
    except ValueError:
        raise UsageError(f"{HANG_FLOOR_ENV}={text!r}: expected seconds, e.g. 30") from None
    if floor <= 0:
        return None

    def limit(test_id: str) -> tuple[float, str] | None:
        took = durations(test_id)
        if took is None:
            return None
        seconds = max(floor, HANG_FACTOR * took)
        return seconds, f"cut as hung: the suite interpreter ran it in {took:.2f}s"

    return limit


class Deadline:
    """The no-progress limit of one interpreter: its timeout, or less while it runs a test
    the suite interpreter ran quickly (`hang_limit`)."""

    def __init__(
        self,
        timeout: float | None,
        hang_limit: HangLimit | None = None,
        start_floor: float = START_FLOOR_S,
    ) -> None:
        self.timeout = timeout
        self.start_floor = start_floor  # before the first test, the limit is no shorter
        self.hang_limit = hang_limit
        self.running: str | None = None  # the test its journal says it is in
        self.started = False  # whether any test has started: before it, start-up
        self.limit = timeout or 0.0  # the limit that ended it, once it did
        self.why = ""  # where a hang limit ended it: what it knew

    @property
    def watching(self) -> bool:
        """Whether it may end the interpreter at all (a timeout, or a hang limit)."""
        return bool(self.timeout) or self.hang_limit is not None

    def observe(self, events: Sequence[dict[str, Any]]) -> None:
        """Follow which test runs."""
        for event in events:
            kind = event.get("e")
            if kind == "start":
                self.running = str(event.get("id"))
                self.started = True
            elif kind in ("finish", "end"):
                self.running = None

    def expired(self, idle_s: float) -> bool:
        """Whether `idle_s` seconds without progress end it (recording the limit and why)."""
        limit, why = self.timeout, ""
        if limit and not self.started:
            limit = max(limit, self.start_floor)
        if self.hang_limit is not None and self.running is not None:
            known = self.hang_limit(self.running)
            if known is not None and (not limit or known[0] < limit):
                limit, why = known
        if limit and idle_s > limit:
            self.limit, self.why = limit, why
            return True
        return False
