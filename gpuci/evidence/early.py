"""Early: the evidence's first interpreters, started as the screens end, while the isolated
pass runs, where a start-up is worth hiding.

The evidence begins once the isolated pass ends, and its first runs would start cold: a
PyTorch suite whose test utilities initialize CUDA waits for that start-up in each. The
screens already name the
likely suspects, so the evidence's prober starts then, and each suspect's first alone-run
starts ahead, held after its collection while the isolated pass goes on: as many as start
at once, nothing queued (the isolated pass may change the plan). The evidence takes that
prober over (`gather_evidence(started=)`): its clock and budget start then; the
interpreters of its first runs wait on, idle from then, and the others are ended
(`Ahead.renew`). A check stopped before its evidence ends them (`close`).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from gpuci.evidence.alone import alone_runs_wanted, prioritize
from gpuci.evidence.budget import fastest_start_up
from gpuci.evidence.probe import Prober, start_prober
from gpuci.evidence.requests import Request
from gpuci.evidence.results import ModeResults, load_mode_results
from gpuci.formats import EVIDENCE_DIR
from gpuci.model import Mode
from gpuci.run.proc.discover import file_of
from gpuci.run.proc.gpumem import screen_peaks
from gpuci.run.proc.supervisor import Supervisor


def evidence_prober(
    out: Path,
    results: dict[Mode, ModeResults],
    *,
    python: str,
    timeout: float | None,
    budget_s: float | None,
    workers: int,
    pytest_args: tuple[str, ...] | None = None,
) -> Prober:
    """The evidence's prober of the results directory `out` (`results`, its modes)."""
    first = next(iter(results.values())).run
    if pytest_args is not None:
        first = dataclasses.replace(first, pytest_args=pytest_args)
    return start_prober(
        out / EVIDENCE_DIR,
        first,
        python=python,
        timeout=timeout,
        budget_s=budget_s,
        supervisor=Supervisor(),
        mode_name=EVIDENCE_DIR,
        slots=workers,
        # an expensive start-up (even the quickest one) widens the slots to the cores
        start_s=fastest_start_up(results),
    )


def first_alone_runs(
    results: dict[Mode, ModeResults], wanted: dict[str, int], *, then: int | None = None
) -> list[str]:
    """The tests whose first alone-runs begin the evidence, in order: the isolation suspects,
    then (`then` of them, None: all) those that failed the same way everywhere and each
    large group's representative. Without the isolated pass's results a test that failed in
    every screen looks consistent (a memory hog, the evidence's first run, would start
    cold)."""
    plan = prioritize(results, wanted)
    later = [*plan.consistent, *(g.representatives[0] for g in plan.groups)]
    return [*plan.isolation, *later[:then]]


@dataclasses.dataclass(slots=True)
class EarlyEvidence:
    """The evidence's prober started while the isolated pass runs (`start`), until the
    evidence takes it (`take`) or the check stops before (`close`)."""

    out: Path
    runs: int
    python: str
    timeout: float | None
    prober: Prober | None = None

    def start(self, workers: int) -> None:
        """The screens ended (their results in `out`) and the isolated pass begins: where
        start-ups are worth hiding, the evidence's first runs start now."""
        results = load_mode_results(self.out)
        wanted = alone_runs_wanted(results, self.runs) if self.runs else {}
        if not wanted:
            return
        prober = evidence_prober(
            self.out,
            results,
            python=self.python,
            timeout=self.timeout,
            budget_s=None,
            workers=workers,
        )
        if not prober.hides_start_ups:
            prober.close()
            return
        self.prober = prober
        # each suspect's first alone-run, in order, as many as start now: the isolated pass
        # may change the plan, and what waited for room would start in the evidence's
        firsts = first_alone_runs(results, wanted)
        prober.start_ahead(Request(ids=(test_id,), strict=True) for test_id in firsts)
        if prober.ahead is not None:
            prober.ahead.drop_queued()

    def take(self, results: dict[Mode, ModeResults], budget_s: float | None) -> Prober | None:
        """The prober, for the evidence of every mode's `results`, which begins now: its
        clock and its budget from now, and the peaks of every mode (the isolated pass's too)
        admitting its runs."""
        prober, self.prober = self.prober, None
        if prober is not None:
            if prober.ahead is not None:  # those of the suspects' files now wait on, afresh
                prober.ahead.early = prober.ahead.started
                # the consistent failures' next one, at most, while the isolation suspects
                # run: each starts the one after it (`gpuci.evidence.requests.next_alone`),
                # and idle they kept the room a strict confirmation needed, which then
                # started cold
                wanted = alone_runs_wanted(results, self.runs)
                first = first_alone_runs(results, wanted, then=1)
                prober.ahead.renew({file_of(i) for i in first})
            prober.budget_s = budget_s
            prober.zero = prober.interpreters.zero = time.monotonic()
            prober.admission.peaks.update(screen_peaks(self.out))
        return prober

    def close(self) -> None:
        """The check stopped before its evidence: the interpreters started are ended."""
        prober, self.prober = self.prober, None
        if prober is not None:
            prober.close()
