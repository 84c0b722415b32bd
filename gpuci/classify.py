"""Classify: one test's category from its outcome in each mode and its alone-runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuci.model import NOT_PASSING, Category, Mode, Outcome


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
    6. Failed in `isolated` but passed in `parallel`: the order in the file is the same,
       only chance differs: `flaky`.
    7. Alone it fails (every rerun): `depends-on-others` if it passed somewhere other
       tests ran before it in its interpreter (`suite`; `isolated` or `parallel` unless
       `first_in_file`); `flaky` if it passed only where nothing ran before it (identical
       conditions); `failed` if it passed nowhere.
    8. Alone it passes: `flaky` if it failed in `isolated` with `first_in_file` (identical
       conditions); `order-dependent` if it failed in `suite` or `isolated`;
       `concurrency` if it failed only in `parallel`.

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
    passed = {m for m, o in decided.items() if o is Outcome.PASSED}
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
        after_others = {Mode.SUITE} if first_in_file else {Mode.SUITE, Mode.ISOLATED, Mode.PARALLEL}
        if passed & after_others:
            return Category.DEPENDS_ON_OTHERS
        return Category.FLAKY if passed else Category.FAILED
    if Mode.ISOLATED in failed and first_in_file:
        return Category.FLAKY
    if failed & {Mode.SUITE, Mode.ISOLATED}:
        return Category.ORDER_DEPENDENT
    return Category.CONCURRENCY
