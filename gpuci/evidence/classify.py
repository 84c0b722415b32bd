"""Classify: one test's category from its outcome in each mode and its alone-runs.

`classify_test` is the precedence table; `classify_results` applies it to every test of
a results directory, for the diff and for the evidence engine (which needs the
categories to know whose culprits to search for).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuci.evidence.orders import Order, first_in_interpreter, interpreter_order
from gpuci.evidence.results import ModeResults, keep_worse
from gpuci.model import (
    NOT_PASSING,
    WHOLE_SUITE_MODES,
    Category,
    Mode,
    Outcome,
    TestEvidence,
    TestResult,
)
from gpuci.run.proc.journal import collected_file, uncollectable
from gpuci.run.proc.reports import out_of_device_memory

WARNING = re.compile(r"\b\w*Warning\b")
# a victim answered by group runs (`gpuci.evidence.kinds.groups`): its two probes' kinds
GROUP_WITH = "group after its culprits"
GROUP_WITHOUT = "group without its culprits"


@dataclass(frozen=True, slots=True, kw_only=True)
class Classified:
    """One test's outcomes across modes, its alone-runs, and the category they give."""

    id: str
    category: Category
    outcomes: dict[Mode, Outcome]  # every mode of the results; NOT_RUN where absent
    reruns: tuple[Outcome, ...]  # alone-runs: each mode's own, then the check's evidence
    results: dict[Mode, TestResult]  # its result in each mode that has it, in mode order
    notes: tuple[str, ...] = ()  # what the threads outcome did not decide, and why

    @property
    def seen(self) -> tuple[TestResult, ...]:
        """Its results, in mode order."""
        return tuple(self.results.values())


def classify_results(
    results: Mapping[Mode, ModeResults],
    alone: Mapping[str, Sequence[Outcome]],
    orders: Mapping[Mode, Order] | None = None,
    *,
    together: Mapping[str, tuple[Outcome, ...]] | None = None,
) -> dict[str, Classified]:
    """Every test of `results`, classified, in the order first seen (modes in pipeline order).

    `alone` holds the evidence's alone-runs by id (on top of those in each run.json);
    `together` a group-answered victim's run with its group, without its culprits, which
    decides as an alone-run would (`together_outcomes`) but is none.
    """
    modes = [m for m in Mode if m in results]
    if orders is None:
        orders = {mode: interpreter_order(results[mode]) for mode in modes}
    by_id: dict[Mode, dict[str, TestResult]] = {}
    for mode in modes:
        tests: dict[str, TestResult] = {}
        for test in results[mode].run.tests:
            keep_worse(tests, test)
        by_id[mode] = tests
    threads = results[Mode.THREADS].run.threads if Mode.THREADS in results else None
    # who ran first in its file: each of these modes runs a file in a fresh interpreter
    per_file = [orders[m] for m in (Mode.ISOLATED, Mode.PARALLEL, Mode.THREADS) if m in orders]
    found: dict[str, Classified] = {}
    for test_id in dict.fromkeys(i for mode in modes for i in by_id[mode]):
        mine = {m: by_id[m][test_id] for m in modes if test_id in by_id[m]}
        mine |= _collected_there(mine, by_id, test_id)
        outcomes = {m: mine[m].outcome if m in mine else Outcome.NOT_RUN for m in modes}
        reruns = tuple(r for t in mine.values() for r in t.reruns) + tuple(alone.get(test_id, ()))
        # the first order that ran it: isolated's, or parallel's for a file isolated left out
        where = next((o for o in per_file if test_id in o.where), None)
        first = where is not None and first_in_interpreter(where, test_id)
        judged, notes = _threads_judged(ran_outcomes(outcomes, mine), mine, threads)
        judged, timeouts = timeouts_judged(judged, reruns)
        notes += timeouts
        found[test_id] = Classified(
            id=test_id,
            category=classify_test(
                judged,
                reruns + _seen_alone(mine, orders, test_id) + _together(together, test_id),
                first_in_file=first,
            ),
            outcomes=outcomes,
            reruns=reruns,
            results=mine,
            notes=notes,
        )
    return found


def _collected_there(
    mine: Mapping[Mode, TestResult], by_id: Mapping[Mode, Mapping[str, TestResult]], file: str
) -> dict[Mode, TestResult]:
    """A file that could not be collected in some mode, as collected (passed) in each mode
    where its tests ran: a per-file screen's collection error beside the plain run's pass
    is the file's own finding (an import that needs another file's first), not a failure."""
    if not any(uncollectable(t) for t in mine.values()):
        return {}
    found: dict[Mode, TestResult] = {}
    for mode, tests in by_id.items():
        ran = [t for t in tests.values() if t.file == file and "::" in t.id]
        if mode not in mine and any(t.outcome is not Outcome.NOT_RUN for t in ran):
            found[mode] = collected_file(file)
    return found


def together_outcomes(found: Mapping[str, TestEvidence]) -> dict[str, tuple[Outcome, ...]]:
    """Each group-answered victim's outcomes in its group runs without the culprits: a pass
    there (under the group's load) answers "passes alone", a failure there ran strictly
    (a repeat that went both ways, both: flaky)."""
    together: dict[str, tuple[Outcome, ...]] = {}
    for test_id, evidence in found.items():
        outcomes = tuple(p.outcome for p in evidence.probes if p.kind == GROUP_WITHOUT)
        if outcomes:
            together[test_id] = outcomes
    return together


def _together(
    together: Mapping[str, tuple[Outcome, ...]] | None, test_id: str
) -> tuple[Outcome, ...]:
    return (together or {}).get(test_id, ())


def ran_outcomes(
    outcomes: Mapping[Mode, Outcome], results: Mapping[Mode, TestResult]
) -> dict[Mode, Outcome]:
    """The outcomes of the modes that ran the test: one a lazy isolated pass inferred from
    parallel (its file passed there, or failed alike in every screen) is `not-run`, so the
    category is what it would be had isolated not been asked. Read as a fresh isolated
    failure, the first test of a file that failed alike in every screen and passes alone
    would be `flaky` (a memory hog is such a test)."""
    return {
        m: Outcome.NOT_RUN if m in results and results[m].inferred else o
        for m, o in outcomes.items()
    }


def timeouts_judged(
    outcomes: Mapping[Mode, Outcome], reruns: Sequence[Outcome]
) -> tuple[dict[Mode, Outcome], tuple[str, ...]]:
    """The outcomes the category is decided from where the test timed out in some modes
    and failed in others (or in an alone-run): a failure there, with a note. A hang in one
    mode is how that mode showed what the others show (an order-dependent victim that waits
    forever in threads is order-dependent); `timed-out` is for a test that timed out
    wherever it failed."""
    timed_out = [m for m, o in outcomes.items() if o is Outcome.TIMED_OUT]
    failed_elsewhere = any(
        o in (Outcome.FAILED, Outcome.CRASHED)
        for o in (*(o for m, o in outcomes.items() if m not in timed_out), *reruns)
    )
    if not timed_out or not failed_elsewhere:
        return dict(outcomes), ()
    where = ", ".join(m.value for m in timed_out)
    note = f"timed out in {where}; the other modes and its alone-runs decide its category"
    return {m: Outcome.FAILED if m in timed_out else o for m, o in outcomes.items()}, (note,)


def _threads_judged(
    outcomes: dict[Mode, Outcome], mine: Mapping[Mode, TestResult], threads: int | None
) -> tuple[dict[Mode, Outcome], tuple[str, ...]]:
    """The outcomes the category is decided from, and notes on the threads outcome.

    N copies of a test that needs much of the device not fitting at once is not a thread
    safety bug: a threads failure by device out-of-memory counts as a pass. And a threads
    pass of a test that fails everywhere else is the harness not seeing the failure
    (pytest-run-parallel 0.10 reports a test failing by a warning as passed in threads).
    """
    result = mine.get(Mode.THREADS)
    if result is None:
        return outcomes, ()
    n = threads or "several"
    if result.outcome is Outcome.FAILED and out_of_device_memory(result.message):
        note = (
            f"failed in {n} threads only by running out of device memory: {n} copies at once"
            " do not fit; not a thread-safety bug"
        )
        return {**outcomes, Mode.THREADS: Outcome.PASSED}, (note,)
    others = {m: o for m, o in outcomes.items() if m is not Mode.THREADS}
    ran = {o for o in others.values() if o not in (Outcome.NOT_RUN, Outcome.SKIPPED)}
    if result.outcome is Outcome.PASSED and ran and ran <= NOT_PASSING:
        failure = next(
            (t.message for m, t in mine.items() if m is not Mode.THREADS and t.message), ""
        )
        why = (
            ": it fails by a warning, which pytest-run-parallel reports as a pass in threads"
            if WARNING.search(failure)
            else ""
        )
        return outcomes, (
            f"passed in threads, where the threads harness did not see the failure{why}",
        )
    return outcomes, ()


def _seen_alone(
    mine: Mapping[Mode, TestResult], orders: Mapping[Mode, Order], test_id: str
) -> tuple[Outcome, ...]:
    """The isolated outcome of a test that ran first in its fresh interpreter: an alone-run
    in all but name (the evidence counts it as one), so a flaky test that passed there and
    failed its alone-run is flaky, not one that needs others."""
    isolated = mine.get(Mode.ISOLATED)
    order = orders.get(Mode.ISOLATED)
    if isolated is None or order is None or isolated.inferred:
        return ()
    if isolated.outcome not in (Outcome.PASSED, Outcome.FAILED):
        return ()
    return (isolated.outcome,) if first_in_interpreter(order, test_id) else ()


def classify_test(  # noqa: PLR0911, PLR0912 -- a precedence table reads best in one place
    outcomes: Mapping[Mode, Outcome],
    reruns: Sequence[Outcome],
    *,
    first_in_file: bool = False,
) -> Category:
    """One test's category from its outcome in each mode and its alone-reruns.

    `first_in_file` says that nothing ran before the test in its isolated interpreter (it
    is its file's first test, or the first after a crash): isolated then ran it under the
    same conditions as an alone-rerun, so a difference between the two is chance.

    Precedence, first match wins:

    1. Outcomes `not-run` are ignored (a mode, or a mode's shard, that did not run it);
       when every outcome is `not-run` the test is `not-run`.
    2. `crashed` in any mode, then `timed-out` in any mode: the interpreter died, or was
       killed, while the test ran. This holds even when only `suite` saw it: the outcomes
       per mode in verdict.json show where, and a crash outranks any comparison.
    3. All remaining outcomes `skipped`: `skipped`. Otherwise a skip says nothing.
    4. No failure in any mode nor any rerun: `passed`.
    5. Reruns that both passed and did not pass (failed, crashed or timed out): `flaky`.
    6. Failed in `isolated` but passed in `parallel`: it runs the file in the same order,
       with more going on beside it, not less; only chance differs: `flaky`. Not so for
       `threads`: each test runs in fresh worker threads, so thread-local state an earlier
       test left (CuPy's current stream, a per-thread cache) does not reach it there: a
       leaked non-blocking stream's victim fails in isolated and passes in threads.
    7. Alone it fails (every rerun): `depends-on-others` if it passed somewhere other
       tests ran before it in its interpreter (`suite`, `reversed`, `shuffled`;
       `isolated` or `parallel` unless `first_in_file`); `flaky` if it passed only where
       nothing ran before it (identical conditions); `failed` if it passed nowhere. A pass
       in `threads` counts for nothing here: it only ever clears a test of being
       thread-unsafe (fresh worker threads see no earlier test's thread-local state, and
       pytest-run-parallel 0.10 reports a test that fails by a warning as passed).
    8. Alone it passes: `flaky` if it failed in `isolated` with `first_in_file` (identical
       conditions); `order-dependent` if it failed in `suite`, `isolated` or a latent
       order (`reversed`, `shuffled`: `gpuci.evidence.latent` marks those);
       `concurrency` if it failed in `parallel` (with or without `threads`: a failure
       with no threads needs none to explain it, and the culprit search can pair files);
       `thread-unsafe` if it failed only in `threads`.

    Without reruns (`--reruns 0`, or the mode that failed it was interrupted) the isolated
    outcome stands in for "alone": it is the closest to it, a fresh interpreter with only
    the test's own file before it. Without that either, "alone" is taken to pass when
    some mode passed and to fail otherwise.
    """
    ran = {m: o for m, o in outcomes.items() if o is not Outcome.NOT_RUN}
    if not ran:
        return Category.NOT_RUN
    if Outcome.CRASHED in ran.values():
        return Category.CRASHED
    if Outcome.TIMED_OUT in ran.values():
        return Category.TIMED_OUT
    decided = {m: o for m, o in ran.items() if o is not Outcome.SKIPPED}
    if not decided:
        return Category.SKIPPED
    failed = {m for m, o in decided.items() if o is Outcome.FAILED}
    # A pass in threads only ever clears a test of thread-unsafety: it says nothing about
    # other tests before it (fresh worker threads), and the harness misses some failures.
    passed = {m for m, o in decided.items() if o is Outcome.PASSED and m is not Mode.THREADS}
    rerun_passed = Outcome.PASSED in reruns
    rerun_failed = any(r in NOT_PASSING for r in reruns)
    if not failed and not rerun_failed:
        return Category.PASSED
    if rerun_passed and rerun_failed:
        return Category.FLAKY
    if Mode.ISOLATED in failed and Mode.PARALLEL in passed:
        return Category.FLAKY

    if rerun_failed or rerun_passed:
        alone_passes = rerun_passed
    elif Mode.ISOLATED in decided:
        alone_passes = decided[Mode.ISOLATED] is Outcome.PASSED
    else:
        alone_passes = bool(passed)

    if not alone_passes:
        # every mode runs the earlier tests of the file first, unless it was first in it
        after_others = set(WHOLE_SUITE_MODES) if first_in_file else set(Mode)
        if passed & after_others:
            return Category.DEPENDS_ON_OTHERS
        return Category.FLAKY if passed else Category.FAILED
    if Mode.ISOLATED in failed and first_in_file:
        return Category.FLAKY
    if failed & {*WHOLE_SUITE_MODES, Mode.ISOLATED}:
        return Category.ORDER_DEPENDENT
    if Mode.PARALLEL in failed:
        return Category.CONCURRENCY
    return Category.THREAD_UNSAFE
