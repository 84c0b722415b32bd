"""Culprit searches: which earlier test makes an order-dependent victim fail, which one a
test that depends on others needs, which co-running file a concurrency victim fails
beside (`gpuci.evidence.culprits`: hints first, then a bisection; pairs for contention)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from gpuci.evidence.claims import Claim
from gpuci.evidence.context import Context
from gpuci.evidence.culprits import search_culprits
from gpuci.evidence.kinds.kind import Round
from gpuci.evidence.likely import prepare_searches, withdraw_diagnosed
from gpuci.model import NOT_PASSING, Outcome, TestEvidence


class CulpritSearch:
    """The round's victims' searches; their first runs start while the poisoned runs go
    on, and those of a victim its poisoned runs diagnosed are ended."""

    name: ClassVar[str] = "culprit search"
    phase: ClassVar[str] = "culprits"
    owns: ClassVar[frozenset[str]] = frozenset(
        {"culprits", "search", "probes", "steps", "pair_gpu"}
    )
    in_rounds: ClassVar[bool] = True
    repeats: ClassVar[int] = 1  # a bisection's step; a pair repeats its own (`pairs`)

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> None:
        if state.classified is not None and state.searches is None:
            state.searches = prepare_searches(ctx, state.classified, found, only=state.now.keys())

    def conclude(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        if state.classified is None:
            return dict(found)
        withdraw_diagnosed(ctx.prober, state.searches or {}, found)
        return search_culprits(
            ctx.prober,
            ctx.results,
            state.classified,
            found,
            orders=ctx.orders,
            progress=ctx.progress,
            ledger=ctx.ledger,
            only=state.now.keys(),
        )

    def claim(self, evidence: TestEvidence) -> Claim | None:
        """A victim that passes alone: the search's runs in which it failed with what it
        names, against its alone-runs (the command without them). One that fails alone
        (it depends on others): its alone-runs, against the runs in which it passed with
        what it names. A partner named by its victim's pair: the pair's runs are the
        victim's, its own alone-runs the other half."""
        alone = evidence.alone
        fails_alone = any(o in NOT_PASSING for o in alone) and Outcome.PASSED not in alone
        probes = tuple(p.outcome for p in evidence.probes)
        if fails_alone:
            return Claim(
                victim=evidence.id,
                failing=alone,
                other=tuple(o for o in probes if o is Outcome.PASSED),
            )
        return Claim(
            victim=evidence.id,
            failing=tuple(o for o in probes if o in NOT_PASSING),
            other=alone,
        )
