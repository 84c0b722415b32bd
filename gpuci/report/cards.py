"""The HTML report's "who broke whom": one card per root, with its victims and evidence.

Plain data for the template, from `gpuci.verdict.roots`: the headline with each culprit linked to
its own row where it has one, each victim with the runs of its culprit search, the
minimal command, and what compute-sanitizer said about a culprit run alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuci.model import ISOLATION_CATEGORIES, Category, Outcome, Probe, TestVerdict, Verdict
from gpuci.report.escape import clean_log
from gpuci.verdict.roots import Blame, Headline, reproduce_of, root_commands, unprefixed

SANITIZER_CHARS = 6_000  # of compute-sanitizer's first error block, in the HTML
OUTCOME_VALUES = frozenset(o.value for o in Outcome)
FINDING_ROW = frozenset(Category) - {Category.PASSED, Category.SKIPPED}
# a search run's kind as the report's table says it (`Probe.kind`,
# `gpuci.evidence.search.hinted`)
PROBE_KINDS = {
    "cascade": "an earlier victim's culprits",
    "ledger": "what the state ledger points at",
    "source": "the tests whose source names what its failure quotes",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Ref:
    """A test id, with the anchor of its row in the report ("" where it has none)."""

    id: str
    anchor: str = ""
    category: str = ""  # its own category, where it is a finding itself


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeRow:
    """One run of a culprit search, as the card's evidence table shows it."""

    run: int  # 1-based, in the order they ran
    count: int  # tests before the victim (files beside it)
    earlier: int  # of those, ran before the ones shown (not shown)
    shown: tuple[str, ...]  # the nearest, in the order they ran
    outcome: str
    css: str
    kind: str = ""  # "cascade": it tried an earlier victim's culprits, not this search's step


@dataclass(frozen=True, slots=True, kw_only=True)
class VictimRow:
    """A victim in its root's card: where its row is, and how its culprits were found."""

    ref: Ref
    badge: str
    search: str
    probes: tuple[ProbeRow, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Card:
    """One root: `X broke 7 later tests`, its victims, its command, its evidence."""

    key: str  # the card's HTML id
    category: str
    badge: str  # "new", "known" or ""
    latent: str  # the order plain pytest did not run that alone showed it, or ""
    lead: str
    named: tuple[Ref, ...]  # the culprits the headline names
    more: int
    tail: str
    victims: tuple[VictimRow, ...]
    reproduce: str
    commands: tuple[tuple[str, str], ...]  # (what it shows, command): every one that does
    counted: str  # what a probe's count counts
    listed: str  # what a probe's shown ids are
    runs: int  # probes in all
    sanitizers: tuple[tuple[str, str], ...]  # (culprit, its first error block)
    left: tuple[str, ...] = ()  # what its culprits left that the victims' failure touches


@dataclass(frozen=True, slots=True, kw_only=True)
class RootLink:
    """What a victim's row says instead of repeating its root: a link to the card."""

    key: str
    headline: Headline


def row_anchors(verdict: Verdict) -> dict[str, str]:
    """The HTML id of every finding's row, by test id (passed and skipped have no row)."""
    return {t.id: f"t-{i}" for i, t in enumerate(verdict.tests) if t.category in FINDING_ROW}


def root_cards(blames: Sequence[Blame], anchors: Mapping[str, str]) -> list[Card]:
    """One card per told root, in the order `gpuci.verdict.roots` tells them."""
    return [_card(blame, anchors) for blame in blames]


def root_links(blames: Sequence[Blame]) -> dict[str, RootLink]:
    """Each blamed victim's link to its root's card, by test id."""
    return {v.id: RootLink(key=b.key, headline=b.headline) for b in blames for v in b.victims}


def badge(test: TestVerdict) -> str:
    """`new` or `known` for an isolation finding checked against a baseline, else ""."""
    if test.category not in ISOLATION_CATEGORIES or test.new is None:
        return ""
    return "new" if test.new else "known"


def sanitizer_block(text: str) -> str:
    """compute-sanitizer's output for a <pre>: colours, control characters and its
    `=========` line prefixes gone, capped."""
    return unprefixed(clean_log(text, SANITIZER_CHARS)).strip("\n")


def _card(blame: Blame, anchors: Mapping[str, str]) -> Card:
    culprits = dict(zip(blame.root.culprits, blame.culprits, strict=True))
    named = tuple(_ref(c, culprits.get(c), anchors) for c in blame.headline.culprits)
    victims = tuple(
        VictimRow(
            ref=_ref(v.id, v, anchors, own_category=False),
            badge=badge(v),
            search=v.search,
            probes=_probes(v.probes),
        )
        for v in blame.victims
    )
    concurrency = blame.root.category is Category.CONCURRENCY
    return Card(
        key=blame.key,
        category=blame.root.category.value,
        badge="" if blame.new is None else ("new" if blame.new else "known"),
        latent=blame.latent,
        lead=blame.headline.lead,
        named=named,
        more=blame.headline.more,
        tail=blame.headline.tail,
        victims=victims,
        reproduce=reproduce_of(blame),
        commands=root_commands(blame),
        counted="files beside it" if concurrency else "tests before it",
        listed="the files" if concurrency else "the nearest of them, in the order they ran",
        runs=sum(len(v.probes) for v in victims),
        sanitizers=tuple(
            (t.id, sanitizer_block(t.sanitizer)) for t in blame.culprits if t and t.sanitizer
        ),
        left=blame.root.left,
    )


def _ref(
    test_id: str, test: TestVerdict | None, anchors: Mapping[str, str], *, own_category: bool = True
) -> Ref:
    category = test.category.value if test and own_category and test.id in anchors else ""
    return Ref(id=test_id, anchor=anchors.get(test_id, ""), category=category)


def _probes(probes: Sequence[Probe]) -> tuple[ProbeRow, ...]:
    return tuple(
        ProbeRow(
            run=i,
            count=p.count,
            earlier=max(0, p.count - len(p.shown)),
            shown=p.shown,
            outcome=p.outcome.value,
            css=p.outcome.value if p.outcome.value in OUTCOME_VALUES else "unknown",
            kind=PROBE_KINDS.get(p.kind, p.kind),
        )
        for i, p in enumerate(probes, start=1)
    )
