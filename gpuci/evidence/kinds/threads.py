"""Threads: each thread-unsafe test alone in the threads mode's threads, as its reproduce
command runs it, and where that passes, its threads interpreter's earlier tests replayed
before it in threads, strictly: whether the command shows the race, or only its file's
order in threads does."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import ClassVar

from gpuci.evidence.claims import Claim
from gpuci.evidence.classify import Classified
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.kind import Round
from gpuci.evidence.orders import Order, tests_before
from gpuci.evidence.requests import Request
from gpuci.evidence.results import ModeResults
from gpuci.model import PROBE_SHOWN, Category, Mode, Outcome, Probe, TestEvidence
from gpuci.run.proc.endings import EXIT_ID
from gpuci.run.sched.plan import thread_args
from gpuci.run.sched.progress import say

ADDOPTS = "PYTEST_ADDOPTS"  # how pytest-run-parallel's option reaches one evidence run
PREPARED = 2  # the first runs in threads started ahead, while the searches go on


def thread_unsafe(
    results: Mapping[Mode, ModeResults], classified: Mapping[str, Classified]
) -> tuple[list[str], tuple[str, ...]]:
    """The thread-unsafe tests to run in threads, and the threads mode's arguments (none
    where no threads screen ran)."""
    threads = results.get(Mode.THREADS)
    unsafe = [t.id for t in classified.values() if t.category is Category.THREAD_UNSAFE]
    if threads is None or not unsafe:
        return [], ()
    return unsafe, thread_args(threads.run.threads)


def threaded_requests(tests: Sequence[str], threads: Sequence[str]) -> list[Request]:
    """The first runs in threads, to start ahead while the runs before them go on (each
    later one starts during the run before it); they run whatever the searches find."""
    env = tuple(threads_env(threads).items())
    return [Request(ids=(t,), env=env, strict=True, certain=True) for t in tests[:PREPARED]]


def run_threaded(
    ctx: Context, tests: Sequence[str], threads: Sequence[str], found: Mapping[str, TestEvidence]
) -> dict[str, TestEvidence]:
    """Each thread-unsafe test alone in the threads mode's threads, as its reproduce command
    runs it: whether that command shows the race, or only its file's order in threads does.

    Where it passes alone in threads, its threads interpreter's earlier tests are replayed
    before it, in threads, strictly (nothing else running): a threads screen ran beside
    other interpreters, and only a strict run makes its failure a finding (a Probe)."""
    prober, progress, order = ctx.prober, ctx.progress, ctx.orders.get(Mode.THREADS)
    merged = dict(found)
    env = threads_env(threads)
    say(progress, f"threads: running {len(tests)} thread-unsafe test(s) alone in threads")
    for index, test_id in enumerate(tests):
        if prober.exhausted() or prober.stopping():
            break
        if index + 1 < len(tests):  # the next one's start-up while this one runs
            after = tests[index + 1]
            prober.start_ahead([Request(ids=(after,), env=tuple(env.items()), strict=True)])
        ran = prober.run(
            [test_id],
            phase="threads",
            label=f"threads: {test_id}",
            env=env,
            strict=True,
        )
        before = merged.get(test_id, TestEvidence(id=test_id))
        outcome = ran.outcome(test_id)
        merged[test_id] = dataclasses.replace(before, threaded=outcome)
        say(progress, f"  {test_id}: alone in threads: {outcome.value}")
        earlier = _earlier_in(order, test_id)
        if outcome is Outcome.PASSED and earlier and not prober.exhausted():
            ran = prober.run(
                [*earlier, test_id],
                phase="threads",
                label=f"threads: {test_id} after {len(earlier)} test(s)",
                env=env,
                strict=True,
            )
            replay = Probe(
                count=len(earlier),
                shown=tuple(earlier[-PROBE_SHOWN:]),
                outcome=ran.outcome(test_id),
            )
            merged[test_id] = dataclasses.replace(merged[test_id], probes=(replay,))
            say(
                progress,
                f"  {test_id}: after its file's earlier tests in threads: {replay.outcome.value}",
            )
    return merged


def threads_env(threads: Sequence[str]) -> dict[str, str]:
    """The environment of an evidence run in the threads mode's threads: pytest-run-parallel's
    option after the user's PYTEST_ADDOPTS."""
    return {ADDOPTS: " ".join(filter(None, [os.environ.get(ADDOPTS, ""), *threads]))}


def _earlier_in(order: Order | None, test_id: str) -> list[str]:
    """The tests that ran before `test_id` in its interpreter (real tests only)."""
    before = tests_before(order, test_id) if order is not None else []
    return [i for i in before if "::" in i and not i.endswith(EXIT_ID)]


class Threaded:
    """Each thread-unsafe test alone in the threads mode's threads."""

    name: ClassVar[str] = "threads"
    phase: ClassVar[str] = "threads"
    owns: ClassVar[frozenset[str]] = frozenset({"threaded", "probes"})
    in_rounds: ClassVar[bool] = False
    beside: ClassVar[bool] = False

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> list[Request]:
        # once the categories are known: as the searches begin, and again after the rounds
        if state.classified is not None and self.name not in state.offered:
            state.offered.add(self.name)
            return threaded_requests(*thread_unsafe(ctx.results, state.classified))
        return []

    def conclude(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        if state.classified is None:
            return dict(found)
        unsafe, threads = thread_unsafe(ctx.results, state.classified)
        if not unsafe:
            return dict(found)
        return run_threaded(ctx, unsafe, threads, found)

    def claim(self, evidence: TestEvidence) -> Claim | None:
        return None  # it names no other test
