"""Attempt read back: what one interpreter did, from its journal and its exit status.

Every test it was asked for gets an outcome: the journal's, else the ending's (the test
that had started when it crashed or hung; the tests after it, to resume), else not run
with the reason. What went wrong outside any test (a crash at exit, a collection that
left tests out, pytest's own exit) is a pseudo test of its file, so no report can miss it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuci.model import (
    NOT_PASSING,
    FileStatus,
    Interpreter,
    Outcome,
    TestResult,
    whole_suite_unit,
)
from gpuci.run.proc.deadline import Deadline
from gpuci.run.proc.discover import file_of
from gpuci.run.proc.endings import (
    EXIT_ID,
    Ending,
    choose_ending,
    describe_exit,
    pytest_cause,
    uncollected_message,
)
from gpuci.run.proc.ids import stem_of
from gpuci.run.proc.journal import JournalState, collected_file, not_run
from gpuci.run.proc.launch import Attempt, Launch

UNSTABLE_ID = (
    "its id differs in this interpreter (a parameter computed at import), so it cannot be run by id"
)


def read_attempt(
    launch: Launch,
    interpreter: Interpreter,
    events: list[dict[str, Any]],
    *,
    timed_out: bool,
    excerpt: str,
    deadline: Deadline,
    stopping: bool,
) -> Attempt:
    """Decide every asked-for test's outcome from the journal, exit status and deadline."""
    journal = JournalState.from_events(events)
    attempt = Attempt(interpreter=interpreter, junit_part=launch.junit)
    attempt.finished = list(journal.finished.values())
    attempt.results = journal.results()
    if journal.errors:
        attempt.status = FileStatus.COLLECTION_ERROR
    how = describe_exit(interpreter.exit_code, interpreter.signal)
    ending = choose_ending(
        timed_out=timed_out,
        limit=deadline.limit,
        hung=deadline.why,
        ended=journal.ended,
        stopping=stopping,
        how=how,
        cause=pytest_cause(interpreter.exit_code, events, excerpt) if not timed_out else "",
    )
    if journal.ended is not None and ending.status is None:
        status = int(journal.ended.get("exitstatus", 0))
        died = interpreter.signal is not None or interpreter.exit_code != status
        if died and not stopping:  # a stop kills it: not a crash
            # pytest had finished; the interpreter died on the way out (atexit, CUDA
            # teardown). Every test has its outcome, and the file still crashed.
            attempt.status = FileStatus.CRASHED
            attempt.results.append(
                _unit_failure(
                    launch,
                    Outcome.CRASHED,
                    f"interpreter died at exit after pytest finished: {how}",
                    excerpt,
                    journal.collected,
                )
            )
    if journal.started is not None:
        attempt.results.append(
            TestResult(
                id=journal.started,
                file=file_of(journal.started),
                outcome=ending.outcome,
                message=ending.message,
                log=excerpt if ending.outcome in (Outcome.CRASHED, Outcome.TIMED_OUT) else "",
            )
        )
    if journal.collected is None:
        if ending.before_tests:  # it never got as far as running a test
            attempt.results.append(
                _unit_failure(launch, ending.outcome, ending.before_tests, excerpt)
            )
        remaining: list[str] = []
    else:
        if ending.unit_failure and journal.started is None:  # no test carries it
            attempt.results.append(
                _unit_failure(
                    launch, Outcome.FAILED, ending.unit_failure, excerpt, journal.collected
                )
            )
        attempt.results += _uncollected(launch, journal, ending, excerpt, stopping=stopping)
        remaining = journal.remaining()
    if ending.status is not None:
        attempt.status = ending.status
    progressed = journal.started is not None or bool(journal.finished)
    if ending.resume and progressed:
        attempt.resume = remaining  # a fresh interpreter goes on after the crash
    else:
        attempt.results += [not_run(i, ending.not_run or ending.message) for i in remaining]
    if attempt.status is FileStatus.PASSED and any(
        r.outcome in NOT_PASSING for r in attempt.results
    ):
        attempt.status = FileStatus.FAILED
    return attempt


def _uncollected(
    launch: Launch, journal: JournalState, ending: Ending, excerpt: str, *, stopping: bool
) -> list[TestResult]:
    """The tests it was given and never collected, not run with the reason; where
    pytest gave none (no exit 3 or 4, no collection error), the file fails for them."""
    if launch.ids is None:  # a screen asked for files: what pytest collected is what ran
        return []
    collected = set(journal.collected or ())
    stems = {stem_of(i) for i in collected}
    broken = {file_of(f): m for f, m in journal.errors.items()}

    def why(test_id: str) -> str:
        """What kept a test it was given from being collected, where the journal says."""
        file = file_of(test_id)
        if file in broken:
            return f"{file} could not be collected here: {broken[file]}"
        if stem_of(test_id) in stems:  # an id computed at import differs here (`ids`)
            return UNSTABLE_ID
        return ""

    # a file asked for by its own id (one that could not be collected elsewhere) has the
    # collection's outcome: its error where it had one (a result already), else a pass
    files = [i for i in launch.ids if "::" not in i and i not in collected]
    results = [collected_file(i) for i in files if i not in journal.errors]
    asked = [i for i in launch.ids if i not in collected and i not in files]
    reasons = {i: why(i) for i in asked}
    fallback = ending.unit_failure or "not collected in this interpreter"
    results += [not_run(i, f"not run: {reason or fallback}") for i, reason in reasons.items()]
    unexplained = [i for i, reason in reasons.items() if not reason]
    if unexplained and not ending.unit_failure and not stopping:
        message = uncollected_message(unexplained, len(launch.ids))
        results.append(_unit_failure(launch, Outcome.FAILED, message, excerpt))
    return results


def _unit_failure(
    launch: Launch,
    outcome: Outcome,
    message: str,
    log: str,
    collected: Sequence[str] | None = None,
) -> TestResult:
    """A pseudo test for what went wrong outside any test, so no report can miss it: in
    a suite interpreter, of the last file it was given (or collected)."""
    last = launch.ids or collected or (launch.key,)
    file = last[-1] if whole_suite_unit(launch.key) else launch.key
    return TestResult(
        id=f"{file_of(file)}::{EXIT_ID}",
        file=file_of(file),
        outcome=outcome,
        message=message,
        log=log,
    )
