"""A kind of evidence: one kind of question the evidence asks of the suspects, as the
engine (`gpuci.evidence.kinds.engine`) sees it.

A kind says which runs it wants (`ahead`: the runs it will make, as requests,
`gpuci.evidence.requests.Request`, which the engine hands the check's one runner,
`gpuci.evidence.probe.Prober.start_ahead`, which starts them ahead where a start-up is
worth hiding, admits them to the GPUs and holds the budget; no kind starts an interpreter
itself), what they cost (`phase`: the account's phase its runs are counted and timed
under, evidence.json's `phases`; the check has one budget, and the kinds' order decides
what a tight one cuts, so no kind needs a share of its own), what it concludes
(`conclude`: the evidence with its answers), which fields of a test's evidence it owns
(`owns`), and whether it concludes beside the kind listed before it (`beside`: two searches
that ask different victims different questions share the slots, not a turn each). A kind
whose answer names another test (a culprit, a provider, a partner) declares the runs each
claim stands on (`claim`: the command that shows the finding, each run, and the same
command without the test it names); the engine records no claim without both halves
(`refused`).

The parameters every kind needs (the runner, the screens' results, who ran before whom,
where progress is told, the state ledger) are one frozen `gpuci.evidence.context.Context`;
what one round of the suspects' kinds learns and hands on (which tests it asks about, how
many alone-runs each has had, their categories so far) is its `Round`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from gpuci.evidence.alone import Priorities
from gpuci.evidence.claims import Claim, Standing, judge
from gpuci.evidence.classify import Classified
from gpuci.evidence.context import Context
from gpuci.evidence.requests import Request
from gpuci.evidence.results import ModeResults
from gpuci.evidence.sanitizer import Sanitizing
from gpuci.evidence.victims import Prepared
from gpuci.model import Mode, Outcome, TestEvidence

REFUSED = "not recorded"  # a search note's start where the engine refused its claim


@dataclass(slots=True)
class Round:
    """What one round of the suspects' kinds asks and learns, handed from kind to kind: the
    alone-runs each test wants (`wanted`; `now`, those asked this round), those each had,
    and the categories the alone-runs gave so far."""

    wanted: dict[str, int]  # by test: the alone-runs it wants in all
    pending: dict[str, int] = field(default_factory=dict)  # this round's suspects
    now: dict[str, int] = field(default_factory=dict)  # less those waiting for group runs
    had: dict[str, int] = field(default_factory=dict)  # alone-runs had of those wanted
    plan: Priorities | None = None  # who runs alone first, and how often
    # what the kinds started ahead for a likely failing suspect, each ending its own where
    # the suspect passed its first alone-run (`gpuci.evidence.likely.withdraw_unlikely`)
    unlikely: list[Callable[[str], None]] = field(default_factory=list)
    classified: Mapping[str, Classified] | None = None  # after this round's alone-runs
    # the searches' runs started ahead after the alone-runs, by kind, by victim
    searches: dict[str, Prepared] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)  # waiting victims no group run answered
    # the tests a kind searched this round (a pair's partners too): not searched again
    searched: set[str] = field(default_factory=set)
    offered: set[str] = field(default_factory=set)  # the kinds whose runs were declared once
    # after the rounds: the categories, the alone-runs still wanted, memcheck's answers
    rest: dict[str, int] | None = None
    sanitized: dict[str, str] = field(default_factory=dict)
    # memcheck: on the roots known early, beside the searches (None: not run), and whether
    # to run it after the rounds (None where it is found, False never) with which tool
    sanitizing: Sanitizing | None = None
    sanitize: bool | None = None
    tool: str | None = None

    def next(self, pending: dict[str, int], now: dict[str, int]) -> Round:
        """The next round's: what the rounds so far learned, kept; this round's, anew."""
        return Round(
            wanted=self.wanted,
            pending=pending,
            now=now,
            had=self.had,
            sanitizing=self.sanitizing,
            sanitize=self.sanitize,
            tool=self.tool,
        )


class Kind(Protocol):
    """One kind of question the evidence asks (see the module's docstring)."""

    name: ClassVar[str]  # the question, as the engine's list and the docs say it
    phase: ClassVar[str]  # the account's phase its runs count under: what they cost
    owns: ClassVar[frozenset[str]]  # the fields of TestEvidence it writes
    in_rounds: ClassVar[bool]  # asked of each round's suspects, else once after the rounds
    # concludes beside the kind listed before it, their runs sharing the runner's slots:
    # neither asks what the other answers (the culprit and the provider searches)
    beside: ClassVar[bool]

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> list[Request]:
        """The runs this kind will make, as far as they are known now, as requests the
        engine hands the runner (`Prober.start_ahead`), which alone starts them ahead,
        admits them and charges them (called before each earlier kind concludes; a request
        already waiting counts)."""

    def conclude(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        """Make this kind's runs; the evidence with its answers."""

    def claim(self, evidence: TestEvidence) -> Claim | None:
        """The runs the culprits named in `evidence` stand on, as this kind recorded them:
        the command that shows the finding and the same command without what it names
        (None where it recorded none)."""


def standing(kind: Kind, evidence: TestEvidence, earlier: tuple[Outcome, ...] = ()) -> Standing:
    """Whether the culprits `kind` named in `evidence` stand on the runs it recorded: its
    claim's other half is missing or failed, or its failing half went both ways or failed
    fewer than twice, and they do not (see `gpuci.evidence.claims`). `earlier`: the
    alone-runs a `gpuci run` job made inside its mode (the same command as the evidence's)."""
    claim = kind.claim(dataclasses.replace(evidence, alone=earlier + evidence.alone))
    if claim is None:
        return Standing.UNASKED
    return judge(claim)


def screens_alone(results: Mapping[Mode, ModeResults]) -> dict[str, tuple[Outcome, ...]]:
    """The alone-runs `gpuci run` jobs made inside their modes, by test, every mode's."""
    alone: dict[str, tuple[Outcome, ...]] = {}
    for mode_results in results.values():
        for test in mode_results.run.tests:
            if test.reruns:
                alone[test.id] = alone.get(test.id, ()) + test.reruns
    return alone


def refused(
    kinds: Mapping[str, Kind],
    before: Mapping[str, TestEvidence],
    after: Mapping[str, TestEvidence],
    earlier: Mapping[str, tuple[Outcome, ...]],
) -> dict[str, TestEvidence]:
    """`after`, less every claim that its kind's runs do not show both ways (`standing`),
    `kinds` by the test it is made for: the test keeps the culprits it had `before`, and
    its search says why the new ones were not recorded. The alone-runs a `gpuci run` job
    made inside its mode (`earlier`, `screens_alone`) are alone-runs too: the same command."""
    kept = dict(after)
    for test_id, kind in kinds.items():
        evidence = after.get(test_id)
        if evidence is None or not evidence.culprits:
            continue
        judged = standing(kind, evidence, earlier.get(test_id, ()))
        if judged is Standing.STANDS:
            continue
        had = before.get(test_id)
        note = f"{REFUSED}: {kind.name} named {', '.join(evidence.culprits)}: {judged.value}"
        kept[test_id] = dataclasses.replace(
            evidence,
            culprits=had.culprits if had is not None else (),
            search="; ".join(filter(None, (evidence.search, note))),
        )
    return kept


def claimed(
    kind: Kind, before: Mapping[str, TestEvidence], after: Mapping[str, TestEvidence]
) -> dict[str, Kind]:
    """The tests `kind` named others for (culprits it set or changed), each with `kind`."""
    return {
        test_id: kind
        for test_id, evidence in after.items()
        if evidence.culprits
        and (test_id not in before or before[test_id].culprits != evidence.culprits)
    }
