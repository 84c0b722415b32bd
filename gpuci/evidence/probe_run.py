"""ProbeRun: what one evidence interpreter did (each test's outcome, where its output is),
as `gpuci.evidence.probe.Prober.run` hands it to the kinds of evidence."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuci.evidence.account import Ended
from gpuci.model import Outcome, TestResult


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeRun:
    """What one evidence interpreter did: each test's outcome, and where its output is."""

    outcomes: dict[str, Outcome]
    log: Path  # the interpreter's capped log (shared by the runs of one file)
    log_from: int  # where this run's output begins in it
    results: dict[str, TestResult] = field(default_factory=dict)  # messages, frames
    beside: bool = False  # another evidence run overlapped it (its failure is not strict)
    killed: bool = False  # a speculated run ended once its answer was no longer needed
    pending: Ended | None = None  # a speculated run's account, until `Prober.settle`

    def outcome(self, test_id: str) -> Outcome:
        """The test's outcome; `not-run` where the interpreter never got to it."""
        return self.outcomes.get(test_id, Outcome.NOT_RUN)

    def output(self) -> str:
        """This run's output (the capped log from where it began)."""
        try:
            with self.log.open("rb") as f:
                f.seek(self.log_from)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""
