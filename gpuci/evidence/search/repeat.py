"""The run a search's new claim rests on, made as often as the claim needs
(`gpuci.evidence.claims.REPEATS`), strictly, where the search made it fewer times: the
victim after exactly its culprits, or, for one that needs a provider, the victim alone. Only
that run, and only where the runs already made of it did not go both ways (then the gate
finds the victim flaky)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from gpuci.evidence.claims import REPEATS, Standing
from gpuci.evidence.context import Context
from gpuci.model import PROBE_SHOWN, Probe, TestEvidence


def repeated(
    ctx: Context,
    evidence: TestEvidence,
    *,
    before_it: Sequence[str],
    standing: Callable[[TestEvidence], Standing],
    phase: str,
) -> TestEvidence:
    """`evidence` with `[before_it..., victim]` run again, strictly, until its claim's
    `standing` is no longer unrepeated: at most REPEATS times (a run that never reaches the
    victim shows neither way). A file among `before_it` is collected, none of its tests
    run, as the search ran it."""
    for _ in range(REPEATS):
        if standing(evidence) is not Standing.UNREPEATED:
            return evidence
        if ctx.prober.exhausted() or ctx.prober.stopping():
            return evidence
        ran = ctx.prober.run(
            [*(c for c in before_it if "::" in c), evidence.id],
            collect=[c for c in before_it if "::" not in c],
            phase=phase,
            label=f"culprits of {evidence.id}: after {len(before_it)} test(s), again",
            strict=True,
        )
        again = Probe(
            count=len(before_it),
            shown=tuple(before_it[-PROBE_SHOWN:]),
            outcome=ran.outcome(evidence.id),
        )
        evidence = dataclasses.replace(evidence, probes=(*evidence.probes, again))
    return evidence
