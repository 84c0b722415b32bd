"""compute-sanitizer on the roots: does a culprit or a failing test corrupt memory? Each
alone under memcheck (`gpuci.evidence.sanitizer`): the roots known before the searches
run beside them (`Sanitizing`), the rest after the rounds (`sanitize_roots`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

from gpuci.evidence.claims import Claim
from gpuci.evidence.classify import Classified
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.kind import Round
from gpuci.evidence.requests import Request
from gpuci.evidence.sanitizer import NOT_RUN, PHASE, TOOL, run_memcheck, sanitizer_roots, starved
from gpuci.model import TestEvidence
from gpuci.run.sched.progress import say


class MemcheckRoots:
    """memcheck on each root; where none is found (or --no-sanitize), nothing."""

    name: ClassVar[str] = "memcheck"
    phase: ClassVar[str] = PHASE
    owns: ClassVar[frozenset[str]] = frozenset({"sanitizer"})
    in_rounds: ClassVar[bool] = False
    beside: ClassVar[bool] = False

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> list[Request]:
        # the roots known once a round's alone-runs ended, beside its searches
        sanitizing = state.sanitizing
        if state.rest is None and state.classified is not None and self.name not in state.offered:
            state.offered.add(self.name)
            if sanitizing is not None:  # runs, not interpreters started ahead
                sanitizing.start(state.classified, found)
        return []

    def conclude(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        if state.sanitize is False or state.classified is None:
            return dict(found)
        return sanitize_roots(ctx, state.classified, found, tool=state.tool, done=state.sanitized)

    def claim(self, evidence: TestEvidence) -> Claim | None:
        return None  # it names no other test


def sanitize_roots(
    ctx: Context,
    classified: Mapping[str, Classified],
    found: Mapping[str, TestEvidence],
    *,
    tool: str | None,
    done: Mapping[str, str] | None = None,
) -> dict[str, TestEvidence]:
    """Each root alone under memcheck, its first error block added to its evidence (those
    `done` beside the searches already, `Sanitizing`, not again)."""
    prober, progress = ctx.prober, ctx.progress
    merged = dict(found)
    roots = sanitizer_roots(classified, found)
    done = done or {}
    if not roots:
        return merged
    if tool is None:
        say(progress, f"{TOOL}: not found; {len(roots)} root(s) with a CUDA fault not sanitized")
        return merged
    left = prober.left()
    budget = "" if left is None else f", budget left {left:.0f}s"
    early = sum(1 for r in roots if r in done)
    beside = f" ({early} of them beside the searches)" if early else ""
    say(progress, f"{TOOL}: running {len(roots)} root(s) under memcheck{beside}{budget}")
    for test_id in roots:
        if prober.stopping():
            break
        if test_id in done:
            text = done[test_id]
        else:
            text = NOT_RUN if starved(prober) else run_memcheck(prober, test_id, tool, strict=True)
        before = merged.get(test_id, TestEvidence(id=test_id))
        merged[test_id] = dataclasses.replace(before, sanitizer=text)
        say(progress, f"  {test_id}: sanitizer: {(text.splitlines() or [''])[0]}")
    return merged
