"""Claims: what a finding that names another test needs before it stands.

A finding that names another test (a culprit, a provider, a partner) says that the
victim's outcome turns on it. It stands only on runs that show it both ways, the same
command with and without the test it names:

- the failing half: the command under which the victim fails (after its culprit, beside
  its partner; without its provider), run twice, failing both times. The same command
  twice is the one way to tell a finding from chance;
- the other half: that command with the named test taken out (put in, for a provider),
  where the victim passes.

Failing-half runs that went both ways make the victim `flaky`, whatever else was said of
it; an other half that fails too kills the claim: the victim fails without what it names,
and its search is elsewhere (a victim that fails in its own file alone, in its file).
Group runs, interpreters started ahead and hints choose which runs come first; only the
runs a claim holds decide whether it stands (`judge`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuci.evidence.notes import OTHER_SIDE_FAILED, UNASKED
from gpuci.model import NOT_PASSING, PROBE_SHOWN, Outcome, Probe, TestEvidence

REPEATS = 2  # runs of the failing half: the same command twice


class Standing(enum.Enum):
    """Whether a claim stands, and where not, why."""

    STANDS = "stands"
    FLAKY = "flaky: the same run went both ways"
    FAILS_WITHOUT = "it fails without what it names too"
    UNREPEATED = "its failing run was not repeated"
    UNASKED = "never run without what it names"


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A victim and its outcomes under the two halves' commands."""

    victim: str
    failing: tuple[Outcome, ...]  # under the command that shows the finding, each run
    other: tuple[Outcome, ...]  # under the same command with the named taken out (put in)


def judge(claim: Claim) -> Standing:
    """Whether `claim` stands on its runs (see the module's docstring); runs that did not
    reach the victim (`not-run`, a cut budget) show neither way."""
    failing = _ran(claim.failing)
    other = _ran(claim.other)
    if any(o in NOT_PASSING for o in failing) and Outcome.PASSED in failing:
        return Standing.FLAKY
    if any(o in NOT_PASSING for o in other):
        return Standing.FAILS_WITHOUT
    if not shown_twice(failing):  # a failing half that passed shows no finding either
        return Standing.UNREPEATED
    if not other:
        return Standing.UNASKED
    return Standing.STANDS


def same_command(probes: Iterable[Probe], named: Sequence[str]) -> tuple[Probe, ...]:
    """The runs in `probes` of the command that runs exactly `named` with the victim (before
    it, or beside it for a pair): the runs a claim naming `named` rests on. A probe keeps
    at most PROBE_SHOWN of what ran with the victim (the nearest before it, or a pair's
    first files), so a run of as many tests ending (or, beside, starting) alike is taken
    for the same command."""
    named = tuple(named)
    shapes = {named[-PROBE_SHOWN:], named[:PROBE_SHOWN]}
    return tuple(p for p in probes if p.count == len(named) and p.shown in shapes)


def named_outcomes(evidence: TestEvidence) -> tuple[Outcome, ...]:
    """The victim's outcomes in the runs of the command that names its culprits; a pair run
    in which only the other side failed its way shows the contention too."""
    return tuple(
        Outcome.FAILED if p.kind == OTHER_SIDE_FAILED else p.outcome
        for p in same_command(evidence.probes, evidence.culprits)
        if p.kind != UNASKED
    )


def alone_outcomes(evidence: TestEvidence) -> tuple[Outcome, ...]:
    """The victim's runs with nothing before or beside it: its alone-runs, and the search's
    (a partner's run without its victim, an alone-run repeated for its claim)."""
    searched = (p.outcome for p in same_command(evidence.probes, ()) if p.kind != UNASKED)
    return (*evidence.alone, *searched)


def shown_twice(outcomes: Sequence[Outcome]) -> bool:
    """Whether runs of one command failed at least REPEATS times (a finding seen again)."""
    return sum(1 for o in outcomes if o in NOT_PASSING) >= REPEATS


def _ran(outcomes: Sequence[Outcome]) -> tuple[Outcome, ...]:
    return tuple(o for o in outcomes if o in NOT_PASSING or o is Outcome.PASSED)
