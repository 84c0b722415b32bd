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
"""

from __future__ import annotations

from gpuci.evidence.fingerprints import files_failing_alike
from gpuci.model import Mode, ModeRun
from gpuci.run.proc.discover import Discovery
from gpuci.run.sched.options import ModeOptions
from gpuci.run.sched.plan import files_to_confirm
from gpuci.run.sched.plan_mode import run_one_mode, say

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
    file that does not pass there confirmed alone (`gpuci.run.sched.session`)."""
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
