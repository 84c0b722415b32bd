"""The terminal summary of a verdict: the plain run's counts in pytest's words, the
categories' counts, roots with their victims, each other finding with its evidence, the
verdict. Under -q each finding is its headline; under -v nothing is cut (every finding,
every victim, every different failure)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from gpuci.model import ISOLATION_CATEGORIES, Category, TestVerdict, Verdict, printable
from gpuci.report.groups import INFERRED_SOUND, FindingGroup, group_findings
from gpuci.run.proc.endings import EXIT_ID
from gpuci.run.proc.strays import verdict_lines
from gpuci.run.sched.pace import pace_line
from gpuci.terminal import Terminal
from gpuci.verdict.describe import checked_lines
from gpuci.verdict.roots import (
    Blame,
    blame_of,
    blamed_roots,
    commands_of,
    culprit_note,
    root_commands,
    sanitizer_line,
)

MAX_LISTED = 25  # roots and tests format_summary lists, two lines each
MAX_VICTIMS = 10  # victims listed under one root
MAX_FAILURES = 3  # different failures told under one root; the rest are in verdict.json
CATEGORY_WIDTH = 17  # a finding's line begins with its category, padded to this
MESSAGE_CHARS = 300  # a failure message is cut to this (a test may print anything)
LISTED = ISOLATION_CATEGORIES | {
    Category.FAILED,
    Category.CRASHED,
    Category.TIMED_OUT,
    Category.FLAKY,
}
# what a category's and a verdict's word is painted where the terminal takes colour
COLOR_OF = {Category.FLAKY.value: "yellow", "warn": "yellow", "pass": "green"}
RED = "red"  # every other listed category, and a failed verdict


def format_summary(
    verdict: Verdict, terminal: Terminal | None = None, file: TextIO | None = None
) -> str:
    """The terminal summary: counts, each root once with its victims beneath, each other
    finding with its evidence, then the verdict; as much as `terminal`'s verbosity shows,
    coloured where it colours `file` (default: stdout, where the summary goes)."""
    terminal = terminal or Terminal(color="no")
    stream = sys.stdout if file is None else file

    def paint(word: str, padded: str = "") -> str:
        color = COLOR_OF.get(word.strip(), RED)
        return terminal.paint(padded or word, color, stream)

    cut = not terminal.verbose
    counts = [f"{n} {c.value}" for c in Category if (n := verdict.summary.get(c.value, 0))]
    plain = plain_counts(verdict)
    lines = [
        *([printable(plain)] if plain else []),
        f"categories: {', '.join(counts) or 'no tests'}",
    ]
    blames = blamed_roots(verdict)
    blamed = blame_of(blames)
    listed: list[Blame | TestVerdict | FindingGroup] = [*blames]
    listed += group_findings(
        [t for t in verdict.tests if t.category in LISTED and t.id not in blamed]
    )
    for entry in listed[:MAX_LISTED] if cut else listed:
        if isinstance(entry, Blame):
            told = _root_lines(entry, cut=cut)
            category = entry.root.category.value
        elif isinstance(entry, FindingGroup):
            told = _group_lines(entry)
            category = entry.category.value
        else:
            told = _finding_lines(entry, blamed)
            category = entry.category.value
        # the category's word painted: told[0] begins with it, padded (printable already)
        told[0] = paint(category, told[0][:CATEGORY_WIDTH]) + told[0][CATEGORY_WIDTH:]
        lines += told[:1] if terminal.quiet else told
    if cut and len(listed) > MAX_LISTED:
        lines.append(f"... and {len(listed) - MAX_LISTED} more (see verdict.json; -v lists all)")
    spent = verdict.evidence.get("spent_s")
    if spent is not None and not terminal.quiet:
        budget = verdict.evidence.get("budget_s")
        limit = f" of a {budget:.0f}s budget" if isinstance(budget, int | float) else ""
        most = verdict.evidence.get("concurrency", {}).get("most_at_once", 0)
        together = f", up to {most} at once" if isinstance(most, int) and most > 1 else ""
        runs = verdict.evidence.get("runs", 0)
        lines.append(f"evidence: {runs} run(s) in {spent:.1f}s{limit}{together}")
    pace = verdict.modes.get("suite", {}).get("pace")
    if isinstance(pace, Mapping) and pace and not terminal.quiet:
        lines.append(printable(f"plain run: {pace_line(pace)}"))
    lines += [
        terminal.paint("warning:", "yellow", stream) + printable(f" {line}")
        for line in verdict_lines(verdict.modes, verdict.evidence)
    ]
    lines += [printable(f"modes: {line}") for line in checked_lines(verdict.checked)]
    why = printable(f" ({'; '.join(verdict.reasons)})" if verdict.reasons else "")
    lines.append("verdict: " + paint(printable(verdict.verdict)) + why)
    return "\n".join(lines)


def plain_counts(verdict: Verdict) -> str:
    """`pytest (suite): 1 failed, 3 passed, 4 errors`: the plain run's summary line in
    pytest's words, the suite mode's where it ran (it is the plain pytest run), else the
    first mode's; "" where verdict.json has none."""
    mode = "suite" if "suite" in verdict.modes else next(iter(verdict.modes), "")
    said = verdict.modes.get(mode, {}).get("counts") if mode else None
    return f"pytest ({mode}): {said}" if isinstance(said, str) else ""


def _headline(category: str, new: bool | None, text: str) -> str:
    """A finding's first line: its category padded to CATEGORY_WIDTH, new or known, what."""
    return printable(f"{category:<{CATEGORY_WIDTH}} {_tag(new):<5} {text}")


def _tag(new: bool | None) -> str:
    return "" if new is None else ("new" if new else "known")


def _evidence(test: TestVerdict) -> str:
    """`suite=failed reruns=passed,passed`: what the modes and alone-reruns showed."""
    # a failure a mode took from a screen without running the test is nobody's observation:
    # `isolated=failed` beside `reruns=passed` would read as a contradiction (said below)
    evidence = " ".join(
        f"{mode}={test.said(mode)}"  # in pytest's words: `suite=error`, `suite=xpassed`
        for mode, outcome in test.outcomes.items()
        if mode not in test.inferred or outcome in INFERRED_SOUND
    )
    if test.reruns:
        evidence += f" reruns={','.join(test.reruns)}"
    if test.inferred:  # a lazy isolated pass: the mode never ran it
        modes = " and ".join(test.inferred)
        if all(test.outcomes.get(m) in ("passed", "skipped") for m in test.inferred):
            evidence += f" ({modes} not run for it: taken from its file's pass in parallel)"
        else:  # its category came from the screens and its alone-runs
            evidence += f" ({modes} not re-run for it: its file failed alike in every screen)"
    if test.inferred_from:
        evidence += f" alone=inferred from {len(test.inferred_from)} like it"
    if test.cut:
        evidence += f" ({test.cut})"
    return evidence


def _group_lines(group: FindingGroup) -> list[str]:
    """A group as one finding: its count and places, how it failed, what ran, one command."""
    new = next((t.new for t in group.members if t.new is not None), None)
    lines = [_headline(group.category.value, new, group.title())]
    if group.fingerprint:
        lines.append(printable(f"    failure: {group.fingerprint}"))
    if group.evidence():
        lines.append(printable(f"    alone: {group.evidence()}"))
    if group.reproduce:
        lines.append(printable(f"    reproduce ({group.members[0].id}): {group.reproduce}"))
    return lines


def _root_lines(blame: Blame, *, cut: bool = True) -> list[str]:
    """The root's headline, its victims indented beneath it (the first MAX_VICTIMS where
    `cut`), then its minimal command."""
    category = blame.root.category.value
    lines = [_headline(category, blame.new, blame.headline.text())]
    lines += [
        printable(f"      {_tag(v.new) + ' ' if v.new is not None else ''}{v.id}  {_evidence(v)}")
        for v in (blame.victims[:MAX_VICTIMS] if cut else blame.victims)
    ]
    if cut and len(blame.victims) > MAX_VICTIMS:
        lines.append(
            f"      ... and {len(blame.victims) - MAX_VICTIMS} more victims (-v lists all)"
        )
    lines += [printable(f"    {left}") for left in blame.root.left]  # the state ledger
    notes = dict.fromkeys(n for v in blame.victims for n in v.notes)  # each once
    lines += [printable(f"    {note}") for note in notes]
    first_error = next((t for t in blame.culprits if t and t.sanitizer), None)
    if first_error:
        line = sanitizer_line(first_error.sanitizer)
        lines.append(printable(f"    compute-sanitizer ({first_error.id}): {line}"))
    return lines + _root_failures(blame.victims, cut=cut) + _commands(root_commands(blame))


def _finding_lines(test: TestVerdict, blamed: dict[str, Blame]) -> list[str]:
    """A finding that no root explains: its evidence, what it is, and how to rerun it."""
    lines = [_headline(test.category.value, test.new, f"{test.id}  {_evidence(test)}")]
    if test.id.endswith(EXIT_ID) and test.message:  # outside any test: say what it was
        lines.append(printable(f"    why: {_bounded(test.message)}"))
    for what in (test.diagnosis, culprit_note(test, blamed), *test.notes):
        if what:
            lines.append(printable(f"    {what}"))
    if test.sanitizer:
        lines.append(printable(f"    compute-sanitizer: {sanitizer_line(test.sanitizer)}"))
    if test.message and not test.id.endswith(EXIT_ID):
        lines.append(printable(f"    failure: {_bounded(test.message)}"))
    lines += _commands(commands_of(test))
    return lines


def _commands(commands: Sequence[tuple[str, str]]) -> list[str]:
    """Each command that shows the finding, after what it shows."""
    return [printable(f"    {what}: {command}") for what, command in commands]


def _root_failures(victims: Sequence[TestVerdict], *, cut: bool = True) -> list[str]:
    """How the victims failed: one line where they failed alike (one fingerprint), else the
    first few different failures (all where not `cut`), each with its victim."""
    alike: dict[str, TestVerdict] = {}
    for victim in victims:
        if victim.message:
            alike.setdefault(victim.fingerprint or victim.message, victim)
    if len(alike) == 1:
        (only,) = alike.values()
        return [printable(f"    failure: {_bounded(only.message)}")]
    return [
        printable(f"    failure ({v.id}): {_bounded(v.message)}")
        for v in (list(alike.values())[:MAX_FAILURES] if cut else alike.values())
    ]


def _bounded(message: str) -> str:
    """A failure's first line, cut to MESSAGE_CHARS."""
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 1] + "…"
