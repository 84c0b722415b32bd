"""How an interpreter ended: its exit status and journal, read as what its tests became.

pytest's own failures are failures: an interpreter that ends with pytest's exit 3
(INTERNALERROR) or 4 (usage error), or without running tests it was given, fails its
file in that mode, named with pytest's own cause. Such an end is never a pass.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuci.model import INTERRUPTED, Category, FileStatus, Outcome, Verdict

# an interpreter the time limit cut before its first test: its tests asked nothing
NO_START = "no progress during start-up or collection"

EXIT_ID = "[interpreter exit]"  # pseudo test: what went wrong outside any test of a file
PYTEST_INTERNAL_ERROR = 3
PYTEST_USAGE_ERROR = 4
INTERNAL_PREFIX = "INTERNALERROR>"  # how pytest prints an internal error's traceback
USAGE_PREFIX = "ERROR: "  # how pytest prints a usage error (a missing file, a bad option)
SHOWN_IDS = 3  # of the tests pytest never collected, how many a message names


@dataclass(frozen=True, slots=True)
class Ending:
    """How an interpreter ended, and what that makes of the test it was running."""

    outcome: Outcome  # of the test that started and never finished
    status: FileStatus | None  # None: an orderly end says nothing about the file
    message: str
    before_tests: str  # the message when it ended before any test was collected
    resume: bool = True  # whether a fresh interpreter should go on with the rest
    not_run: str = ""  # the message for tests left behind when not resuming
    unit_failure: str = ""  # a failure of the file itself, where no test carries it


def describe_exit(code: int | None, signum: int | None) -> str:
    """`exit code 3` or `killed by SIGSEGV (signal 11)`."""
    if signum is not None:
        try:
            return f"killed by {signal.Signals(signum).name} (signal {signum})"
        except ValueError:
            return f"killed by signal {signum}"
    return f"exit code {code}"


def pytest_cause(code: int | None, events: Sequence[dict[str, Any]], log: str) -> str:
    """pytest's own cause where it ended with exit 3 or 4, else "": the INTERNALERROR's
    exception and innermost frame from the journal (the log's last lines without one),
    or the usage error pytest printed."""
    if code == PYTEST_INTERNAL_ERROR:
        error = next((e for e in reversed(events) if e.get("e") == "internal-error"), None)
        if error is not None:
            why = f"{error.get('message', '')} (at {error.get('where', '?')})"
        else:
            lines = [
                line.removeprefix(INTERNAL_PREFIX).strip()
                for line in log.splitlines()
                if line.startswith(INTERNAL_PREFIX)
            ]
            why = next((line for line in reversed(lines) if line), "see its log")
        return f"pytest INTERNALERROR: {why}"
    if code == PYTEST_USAGE_ERROR:
        errors = [
            line.removeprefix(USAGE_PREFIX).strip()
            for line in log.splitlines()
            if line.startswith(USAGE_PREFIX)
        ]
        return f"pytest usage error: {errors[-1] if errors else 'see its log'}"
    return ""


def choose_ending(
    *,
    timed_out: bool,
    limit: float,
    ended: dict[str, Any] | None,
    hung: str = "",
    stopping: bool,
    how: str,
    cause: str,
) -> Ending:
    """The ending of an interpreter from what gpuci saw of it and what its journal says."""
    if timed_out:
        return Ending(
            Outcome.TIMED_OUT,
            FileStatus.TIMED_OUT,
            f"timed out after {limit:g}s{f' ({hung})' if hung else ''}; gpuci killed the process",
            f"{NO_START} for {limit:g}s",
        )
    if stopping and ended is None:
        return Ending(Outcome.NOT_RUN, FileStatus.NOT_RUN, f"{INTERRUPTED} while this test ran", "")
    if cause and not stopping:  # pytest itself failed: the file fails with its cause
        return Ending(
            Outcome.FAILED,
            FileStatus.FAILED,
            f"pytest ended the session during this test: {cause}",
            cause,
            not_run=f"not run: {cause}",
            unit_failure=cause,
        )
    if ended is None:
        return Ending(
            Outcome.CRASHED,
            FileStatus.CRASHED,
            f"interpreter died while this test ran: {how}",
            f"interpreter died during start-up or collection: {how}",
        )
    status = int(ended.get("exitstatus", 0))
    return Ending(
        Outcome.FAILED,
        None,
        f"pytest ended the session during this test (exit status {status})",
        "",
        resume=False,
        not_run=f"pytest ended the session first (exit status {status})",
    )


def uncollected_message(missing: Sequence[str], given: int) -> str:
    """Why a file fails whose interpreter never collected tests gpuci gave it."""
    shown = ", ".join(missing[:SHOWN_IDS]) + (", ..." if len(missing) > SHOWN_IDS else "")
    return (
        f"pytest did not collect {len(missing)} of the {given} test(s) gpuci gave it"
        f" ({shown}): collection differs from discovery's"
    )


def no_test_ran(verdict: Verdict) -> bool:
    """Whether a failed verdict ran none of its tests (pytest failed before any): gpuci
    then ends with exit 3, as plain pytest does, not with a verdict on tests never run."""
    tests = [t for t in verdict.tests if "::" in t.id and not t.id.endswith(EXIT_ID)]
    failed = verdict.verdict == "fail"
    return failed and bool(tests) and all(t.category is Category.NOT_RUN for t in tests)
