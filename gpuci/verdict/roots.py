"""Roots as gpuci tells them: each culprit once, with the victims it is blamed for.

The terminal summary, the HTML report and the merge-request comment all show a verdict's
roots the same way, from here: a root is told once, with its victims beneath, instead of
one unrelated finding per victim. A victim that fails alone with poisoned allocations
(it has a `diagnosis`) reads memory it never wrote: its own bug, so no root blames its
culprit for it, and a root left with no other victim is not told at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuci.evidence.classify import GROUP_WITH
from gpuci.model import Category, Root, TestVerdict, Verdict
from gpuci.verdict.causes import root_command

CULPRITS_SHOWN = 4  # culprits a headline names; the rest are counted
_SANITIZER_PREFIX = re.compile(r"^=+ ?", re.MULTILINE)  # compute-sanitizer's `========= `


@dataclass(frozen=True, slots=True, kw_only=True)
class Headline:
    """What a root did, in words around its culprits: `X broke 7 later tests`."""

    lead: str  # the words before the culprits ("3 tests pass only after"), or ""
    culprits: tuple[str, ...]  # the culprits named
    more: int  # culprits not named
    tail: str  # the words after them ("broke 7 later tests"), or ""

    def text(self) -> str:
        """The headline as one line of plain text."""
        named = " and ".join(self.culprits)
        if self.more:
            named += f" and {self.more} more"
        return " ".join(p for p in (self.lead, named, self.tail) if p)


@dataclass(frozen=True, slots=True, kw_only=True)
class Blame:
    """One root as told: its culprits, the victims it broke, and how to reproduce it."""

    key: str  # "root-1": the HTML card's anchor
    root: Root
    headline: Headline
    victims: tuple[TestVerdict, ...]  # blamed ones, in the verdict's order
    culprits: tuple[TestVerdict | None, ...]  # each culprit's own verdict, None for a file
    new: bool | None  # any victim new; None without a baseline

    @property
    def latent(self) -> str:
        """The latent order(s) that alone showed every victim (`reversed`), else ""."""
        if not self.victims or not all(v.latent for v in self.victims):
            return ""
        return " and ".join(dict.fromkeys(v.found_in for v in self.victims))


def headline(category: Category, culprits: Sequence[str], victims: int) -> Headline:
    """The words for a root of `category` with `victims` victims."""
    tests = f"{victims} test{'' if victims == 1 else 's'}"
    named = tuple(culprits[:CULPRITS_SHOWN])
    more = len(culprits) - len(named)
    if category is Category.DEPENDS_ON_OTHERS:
        verb = "passes" if victims == 1 else "pass"
        # provider files: merely collected (imported), none of their tests run
        after = "where pytest imported" if all("::" not in c for c in culprits) else "after"
        return Headline(lead=f"{tests} {verb} only {after}", culprits=named, more=more, tail="")
    if category is Category.CONCURRENCY:
        verb = "fails" if victims == 1 else "fail"
        return Headline(lead=f"{tests} {verb} beside", culprits=named, more=more, tail="")
    if category is Category.ORDER_DEPENDENT:
        later = f"{victims} later test{'' if victims == 1 else 's'}"
        return Headline(lead="", culprits=named, more=more, tail=f"broke {later}")
    return Headline(lead="", culprits=named, more=more, tail=f"came before {tests}")


def blamed_roots(verdict: Verdict) -> list[Blame]:
    """The verdict's roots to tell, new ones first, each with only the victims it broke."""
    tests = {t.id: t for t in verdict.tests}
    told: list[tuple[Root, tuple[TestVerdict, ...]]] = []
    for root in verdict.roots:
        victims = tuple(tests[v] for v in root.victims if v in tests and not tests[v].diagnosis)
        if victims:
            told.append((root, victims))
    # Stable: the diff's order (most victims first) within new, then known roots.
    told.sort(key=lambda item: _new(item[1]) is False)
    return [
        Blame(
            key=f"root-{i}",
            root=root,
            headline=_mutual(root, victims) or headline(root.category, root.culprits, len(victims)),
            victims=victims,
            culprits=tuple(tests.get(c) for c in root.culprits),
            new=_new(victims),
        )
        for i, (root, victims) in enumerate(told, start=1)
    ]


def _mutual(root: Root, victims: Sequence[TestVerdict]) -> Headline | None:
    """A contention both of whose sides failed: `A and B fail beside each other`, told
    once with both sides named (each names the other as its culprit)."""
    if root.category is not Category.CONCURRENCY:
        return None
    sides = {v.file for v in victims}
    if len(sides) < 2 or any(c.partition("::")[0] not in sides for c in root.culprits):
        return None
    named = tuple(v.id for v in victims) if len(victims) <= CULPRITS_SHOWN else tuple(sorted(sides))
    lead = "" if len(victims) <= CULPRITS_SHOWN else f"{len(victims)} tests of"
    return Headline(
        lead=lead,
        culprits=named[:CULPRITS_SHOWN],
        more=len(named) - len(named[:CULPRITS_SHOWN]),
        tail="fail beside each other",
    )


def blame_of(blames: Sequence[Blame]) -> dict[str, Blame]:
    """Each blamed victim's root, by test id."""
    return {v.id: b for b in blames for v in b.victims}


def reproduce_of(blame: Blame) -> str:
    """The root's command: its victims' group runs' (`causes.root_command`), else its
    first blamed victim's (the diff's root may name a diagnosed victim first), else the
    root's own."""
    return root_command(blame.victims) or blame.root.reproduce


def commands_of(test: TestVerdict) -> tuple[tuple[str, str], ...]:
    """Every command that shows a finding, each with what it shows: both halves of an
    order-dependent or depends-on-others finding, else its one command (a concurrency
    finding's pair, run together)."""
    if not test.reproduce:
        return ()
    # answered with the other victims of its culprit: its commands run them all (groups)
    grouped = any(p.kind == GROUP_WITH for p in test.probes)
    if test.category is Category.DEPENDS_ON_OTHERS and test.with_provider:
        collected = all("::" not in c for c in test.providers)  # provider files, imported
        passes = "passes with its provider collected" if collected else "passes after its provider"
        if grouped:
            passes = "they pass with it collected" if collected else "they pass after it"
        fails = "its victims fail without their provider" if grouped else "fails alone"
        return ((fails, test.reproduce), (passes, test.with_provider))
    # a diagnosed victim's command is its poisoned run alone (its own bug): one command
    if test.category is Category.ORDER_DEPENDENT and test.passes_alone and not test.diagnosis:
        if grouped:
            return (
                ("its victims fail after their culprit", test.reproduce),
                ("they pass without it", test.passes_alone),
            )
        return (("fails after its culprit", test.reproduce), ("passes alone", test.passes_alone))
    return (("reproduce", test.reproduce),)


def root_commands(blame: Blame) -> tuple[tuple[str, str], ...]:
    """A root's commands: those of the victim whose command is the root's minimal one."""
    command = reproduce_of(blame)
    first = next((v for v in blame.victims if v.reproduce == command), None)
    return commands_of(first) if first is not None else (("reproduce", command),)


def culprit_note(test: TestVerdict, blames: Mapping[str, Blame]) -> str:
    """Why an isolation finding has no culprit: the search's note ("" where it has one)."""
    if test.id in blames or test.diagnosis or test.culprits or not test.search:
        return ""
    return f"culprit: {test.search}"


def sanitizer_line(text: str) -> str:
    """The first line of compute-sanitizer's error block: the kind of error."""
    return next((s for line in text.splitlines() if (s := unprefixed(line).strip())), "")


def unprefixed(text: str) -> str:
    """compute-sanitizer's output without the `========= ` that starts each of its lines."""
    return _SANITIZER_PREFIX.sub("", text)


def _new(victims: Sequence[TestVerdict]) -> bool | None:
    if all(v.new is None for v in victims):
        return None
    return any(v.new for v in victims)
