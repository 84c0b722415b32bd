"""compute-sanitizer on the roots: does a culprit or a failing test corrupt memory? Each
alone under memcheck (`gpuci.evidence.sanitizer`): the roots known before the searches
run beside them, the rest after the rounds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from gpuci.evidence.ahead import Request
from gpuci.evidence.claims import Claim
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.kind import Round
from gpuci.evidence.sanitizer import PHASE, sanitize_roots
from gpuci.model import TestEvidence


class MemcheckRoots:
    """memcheck on each root; where none is found (or --no-sanitize), nothing."""

    name: ClassVar[str] = "memcheck"
    phase: ClassVar[str] = PHASE
    owns: ClassVar[frozenset[str]] = frozenset({"sanitizer"})
    in_rounds: ClassVar[bool] = False

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
