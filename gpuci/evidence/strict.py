"""Strict: a screen's finding stands only where a strict run shows it too.

The check's screens run beside each other (`run.json`'s `beside`), so a failure there may
be the combined load's, not the test's. Its category comes from strict runs, with nothing
else on its GPUs: the alone-runs, isolated (one file at a time), the failing
interpreter's earlier tests replayed (the culprit search), the pair with a co-running
file, the test alone in threads or its file replayed in threads. A screen failure that
none of them reproduces is `passed`, with a note; one whose strict runs the budget cut
keeps its category, and the cut says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuci.evidence.classify import Classified
from gpuci.evidence.notes import NOT_REPRODUCED, PAIRED, SAME_RUN_BOTH_WAYS, UNASKED
from gpuci.evidence.orders import first_in_interpreter, interpreter_order
from gpuci.evidence.results import ModeResults
from gpuci.model import NOT_PASSING, Category, Mode, Outcome, TestEvidence

SAME_REPLAY = "the same replay of the tests before it, twice: once each way"
SAME_PAIR = "the same pair with a co-running file, twice: once each way"
# the categories a screen alone can suggest, and the strict run each needs
CONFIRMED_BY = {
    Category.ORDER_DEPENDENT: "the failing interpreter's earlier tests replayed",
    Category.CONCURRENCY: "the pair with a co-running file",
    Category.THREAD_UNSAFE: "alone in threads, or its file replayed in threads",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Strict:
    """A test's category after the strict runs, which strict run decided it, and a note."""

    category: Category
    strict: str = ""  # the strict runs that decided the category, "" where none ran
    note: str = ""  # why a screen failure is not a finding


def confirm_strictly(  # noqa: PLR0911 -- each way a category is decided, in turn
    test: Classified, evidence: TestEvidence | None, results: Mapping[Mode, ModeResults]
) -> Strict:
    """`test`'s category as strict runs decide it (see the module's docstring)."""
    category = test.category
    alone = "alone-runs" if test.reruns else ""
    if evidence is not None and SAME_RUN_BOTH_WAYS in evidence.search:
        # the culprit search ran the same command twice: it failed, then passed (or the
        # other way round) under identical conditions
        same = SAME_PAIR if " beside " in evidence.search else SAME_REPLAY
        return Strict(category=Category.FLAKY, strict=same)
    if category in (Category.CRASHED, Category.TIMED_OUT):
        return _died_under_load(test, results, alone)
    paired = evidence is not None and evidence.search.startswith(PAIRED)
    if paired and category in (Category.ORDER_DEPENDENT, Category.PASSED):
        # its replay showed nothing, a pair with a co-running file did; or it passed in
        # every screen and failed its victim's way in the victim's pair (pairs.py)
        return Strict(category=Category.CONCURRENCY, strict=CONFIRMED_BY[Category.CONCURRENCY])
    if category not in CONFIRMED_BY:
        decided = category in (Category.FAILED, Category.FLAKY, Category.DEPENDS_ON_OTHERS)
        return Strict(category=category, strict=alone if decided else "")
    shown = _shown_strictly(test, evidence)
    if shown:
        return Strict(category=category, strict=shown)
    screens = [
        m
        for m, o in test.outcomes.items()
        if o in NOT_PASSING and m in results and results[m].run.beside
    ]
    if not screens or evidence is None:
        return Strict(category=category)  # serial modes, or no strict run yet
    first = category is Category.THREAD_UNSAFE and _first_in_threads(test.id, results)
    if not _never_reproduced(category, evidence, first_in_threads=first):
        return Strict(category=category)  # its strict runs were cut: it stands, cut
    passes = _strict_passes(test, evidence)
    where = ", ".join(m.value for m in screens)
    return Strict(
        category=Category.PASSED,
        strict=f"{alone}; {CONFIRMED_BY[category]}" if alone else CONFIRMED_BY[category],
        note=(
            f"failed once under the check's combined load ({where});"
            f" passed in {passes} strict run{'s' if passes != 1 else ''}"
        ),
    )


def _died_under_load(test: Classified, results: Mapping[Mode, ModeResults], alone: str) -> Strict:
    """A crash or a time-out only in screens, where isolated (one file at a time) and every
    alone-run passed: the combined load's, not a finding."""
    died = [m for m, o in test.outcomes.items() if o in (Outcome.CRASHED, Outcome.TIMED_OUT)]
    strict_passes = (
        test.outcomes.get(Mode.ISOLATED) is Outcome.PASSED
        and not _inferred(test, Mode.ISOLATED)
        and test.reruns
        and all(r is Outcome.PASSED for r in test.reruns)
    )
    screened = all(m in results and results[m].run.beside for m in died)
    if not (died and screened and strict_passes):
        return Strict(category=test.category, strict=alone)
    how = "crashed" if test.category is Category.CRASHED else "timed out"
    passes = 1 + len(test.reruns)
    return Strict(
        category=Category.PASSED,
        strict=f"isolated; {alone}",
        note=(
            f"{how} once under the check's combined load ({', '.join(m.value for m in died)});"
            f" passed in {passes} strict runs"
        ),
    )


def _shown_strictly(  # noqa: PLR0911 -- one strict run per line reads best
    test: Classified, evidence: TestEvidence | None
) -> str:
    """Which strict run showed the finding; "" where none did."""
    if test.outcomes.get(Mode.ISOLATED) in NOT_PASSING and not _inferred(test, Mode.ISOLATED):
        return "isolated: after the earlier tests of its file, one file at a time"
    if evidence is None:
        return ""
    if test.category is Category.ORDER_DEPENDENT and evidence.poisoned in NOT_PASSING:
        return "alone with poisoned allocations"
    if evidence.culprits and test.category is not Category.THREAD_UNSAFE:
        return CONFIRMED_BY[test.category]
    if test.category is Category.THREAD_UNSAFE:
        if evidence.threaded in NOT_PASSING:
            return "alone in threads"
        if any(p.outcome in NOT_PASSING for p in evidence.probes):
            return "its file replayed in threads"
    return ""


def _never_reproduced(
    category: Category, evidence: TestEvidence, *, first_in_threads: bool = False
) -> bool:
    """Whether the strict runs it needs ran to the end and all passed."""
    if category is Category.THREAD_UNSAFE:
        # alone in threads is its file's replay too where nothing ran before it there
        replayed = bool(evidence.probes) or first_in_threads
        return evidence.threaded is Outcome.PASSED and replayed
    if category is Category.ORDER_DEPENDENT and evidence.search.startswith(NOT_REPRODUCED):
        # a search that never saw it fail again; one that saw it once was the same run going
        # both ways, flaky (confirm_strictly)
        asked = [p for p in evidence.probes if p.kind != UNASKED]
        return not any(p.outcome in NOT_PASSING for p in asked) and any(
            p.outcome is Outcome.PASSED for p in asked
        )
    # a screen failure beside others is answered only by a pair run that asked its
    # question: both sides started together and overlapping, the victim run to its end
    # (alone-runs ask another); "no file ran beside it" asked nothing
    asked = [p for p in evidence.probes if p.kind != UNASKED]
    return evidence.search.startswith(NOT_REPRODUCED) and any(
        p.outcome is Outcome.PASSED for p in asked
    )


def _strict_passes(test: Classified, evidence: TestEvidence) -> int:
    runs = [*test.reruns, *(p.outcome for p in evidence.probes if p.kind != UNASKED)]
    if evidence.threaded is not None:
        runs.append(evidence.threaded)
    return sum(1 for o in runs if o is Outcome.PASSED)


def _first_in_threads(test_id: str, results: Mapping[Mode, ModeResults]) -> bool:
    threads = results.get(Mode.THREADS)
    return threads is not None and first_in_interpreter(interpreter_order(threads), test_id)


def _inferred(test: Classified, mode: Mode) -> bool:
    result = test.results.get(mode)
    return result is not None and result.inferred
