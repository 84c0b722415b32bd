"""Rows: a test as both templates show it (its outcome per mode, what ran alone, what to
run), findings grouped by failure into one row, and the verdict's tests by category.
`gpuci.report.report_data` lays them out for the HTML report, `gpuci.report.comment_data`
for the merge request's comment.
"""

from __future__ import annotations

import dataclasses
import re
import signal
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuci.model import ISOLATION_CATEGORIES, Category, Mode, Outcome, TestVerdict, Verdict
from gpuci.report.cards import RootLink, badge, sanitizer_block
from gpuci.report.escape import clean_log, cut
from gpuci.report.groups import INFERRED_SOUND, FindingGroup, group_findings
from gpuci.report.timeline import file_runs
from gpuci.verdict.roots import sanitizer_line

HTML_MESSAGE_CHARS = 2_000
VERDICT_EMOJI = {"pass": "✅", "warn": "⚠️", "fail": "❌"}
OUTCOME_VALUES = frozenset(o.value for o in Outcome)
FINDING_ORDER = (
    Category.ORDER_DEPENDENT,
    Category.DEPENDS_ON_OTHERS,
    Category.CONCURRENCY,
    Category.THREAD_UNSAFE,
    Category.FAILED,
    Category.CRASHED,
    Category.TIMED_OUT,
    Category.FLAKY,
    Category.NOT_RUN,
)

_SIGNAL = re.compile(r"\b(?:signal\s+(\d+)|(SIG[A-Z0-9]+))")
_EXIT = re.compile(r"\bexit(?:ed)?(?:\s+with)?\s+(?:code|status)\s+(-?\d+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One test as both templates show it."""

    id: str
    file: str
    category: str
    badge: str  # "new", "known" or ""
    outcomes: tuple[tuple[str, str], ...]  # (text, CSS class) per column mode
    reruns: str
    message: str
    reproduce: str
    cause: str = ""  # signal or exit status of a crash
    log: str = ""
    log_open: bool = False
    anchor: str = ""  # the row's HTML id
    root: RootLink | None = None  # a blamed victim's root: the row links to its card
    note: str = ""  # why an isolation finding has no culprit, and the test's own notes
    with_provider: str = ""  # depends-on-others: the command that passes, provider first
    diagnosis: str = ""  # what the GPU-native evidence says the bug is
    sanitizer: str = ""  # compute-sanitizer's first error block (HTML)
    sanitizer_line: str = ""  # its first line (the comment)
    members: tuple[str, ...] = ()  # a group's tests (gpuci.report.groups): the row stands for them


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    """A titled table of rows."""

    key: str
    title: str
    intro: str
    rows: Sequence[Row]
    categories: tuple[str, ...] = ()
    more: int = 0  # tests left out (the comment only)

    @property
    def total(self) -> int:
        """The tests the section tells of: a group's row counts its members."""
        return sum(len(r.members) or 1 for r in self.rows) + self.more


def mode_columns(verdict: Verdict) -> list[str]:
    """The modes to show, in pipeline order, then any unknown ones by name."""
    seen = set(verdict.modes)
    for test in verdict.tests:
        seen.update(test.outcomes)
    known = [m.value for m in Mode if m.value in seen]
    return known + sorted(seen - set(known))


def _reruns(reruns: Iterable[str]) -> str:
    """`passed \u00d72, failed` from `[passed, passed, failed]`."""
    parts: list[tuple[str, int]] = []
    for outcome in reruns:
        if parts and parts[-1][0] == outcome:
            parts[-1] = (outcome, parts[-1][1] + 1)
        else:
            parts.append((outcome, 1))
    return ", ".join(f"{o} \u00d7{n}" if n > 1 else o for o, n in parts)


def _crash_cause(test: TestVerdict, modes: Mapping[str, Any]) -> str:
    """The signal or exit status that ended a crashed test's interpreter, if known."""
    match = _SIGNAL.search(test.message)
    if match:
        return _signal_text(match.group(1) or match.group(2))
    match = _EXIT.search(test.message)
    if match:
        return f"exit code {match.group(1)}"
    for mode, outcome in test.outcomes.items():
        if outcome != Outcome.CRASHED.value:
            continue
        for run in file_runs(modes.get(mode)):
            if run.get("file") != test.file:
                continue
            signals = [s for s in run.get("signals") or () if isinstance(s, int)]
            if signals:
                return _signal_text(str(signals[-1]))
            codes = [c for c in run.get("exit_codes") or () if isinstance(c, int) and c]
            if codes:
                return f"exit code {codes[-1]}"
    return ""


def _signal_text(value: str) -> str:
    """`signal 11 (SIGSEGV)` from `11` or `SIGSEGV`."""
    try:
        sig = signal.Signals(int(value)) if value.isdigit() else signal.Signals[value]
    except (KeyError, ValueError):
        return f"signal {value}" if value.isdigit() else value
    return f"signal {sig.value} ({sig.name})"


def finding_row(
    test: TestVerdict,
    columns: Sequence[str],
    modes: Mapping[str, Any],
    *,
    message_chars: int,
    log_chars: int = 0,
    log_open: bool = False,
    anchor: str = "",
    root: RootLink | None = None,
    note: str = "",
) -> Row:
    """One test as a row: outcomes per column mode, evidence, and what to run."""
    message = cut(test.message, message_chars)
    crashed = test.category in (Category.CRASHED, Category.TIMED_OUT)
    return Row(
        id=test.id,
        file=test.file,
        category=test.category.value,
        badge=badge(test),
        outcomes=tuple(
            _outcome(
                test.outcomes.get(mode, ""), inferred=mode in test.inferred, said=test.said(mode)
            )
            for mode in columns
        ),
        reruns="; ".join(p for p in (_reruns(test.reruns), test.cut) if p),
        message=message,
        reproduce="" if root else test.reproduce,  # the root's card has the command
        cause=_crash_cause(test, modes) if test.category is Category.CRASHED else "",
        log=clean_log(test.log, log_chars) if crashed and log_chars and test.log else "",
        log_open=log_open,
        anchor=anchor,
        root=root,
        note="; ".join(p for p in (note, *test.notes) if p),
        with_provider="" if root else test.with_provider,
        diagnosis=test.diagnosis,
        sanitizer=sanitizer_block(test.sanitizer) if test.sanitizer else "",
        sanitizer_line=sanitizer_line(test.sanitizer),
    )


def grouped_rows(
    tests: Sequence[TestVerdict],
    row_of: Callable[[TestVerdict, int], Row],
    apart: Collection[str] = (),
) -> list[Row]:
    """The tests' rows, a group of findings (gpuci.report.groups) as one: its first member's row
    with the group's count and places as its name, how they failed, what ran alone."""
    rows: list[Row] = []
    for i, entry in enumerate(group_findings(tests, apart=apart)):
        if isinstance(entry, FindingGroup):
            first = row_of(entry.members[0], i)
            rows.append(
                dataclasses.replace(
                    first,
                    id=entry.title(),
                    message=cut(entry.fingerprint, HTML_MESSAGE_CHARS) or first.message,
                    reruns=entry.evidence() or first.reruns,
                    reproduce=entry.reproduce if not first.root else "",
                    members=tuple(t.id for t in entry.members),
                )
            )
        else:
            rows.append(row_of(entry, i))
    return rows


NOT_RERUN = "not re-run"


def _outcome(value: str, *, inferred: bool = False, said: str = "") -> tuple[str, str]:
    """An outcome's text (in pytest's words, `said`, where given: `error`, `xfailed`) and
    CSS class (the outcome's); one we do not know gets a neutral class."""
    if not value:
        return ("", "none")
    if inferred and value not in INFERRED_SOUND:
        # Its file failed alike in every screen, so isolated did not re-run it and took the
        # parallel screen's outcome: a failure nobody saw in isolated, which beside a pass
        # alone reads as a contradiction. Its alone-runs decide; say that it did not run.
        return (NOT_RERUN, "none")
    text = f"{said or value} (inferred)" if inferred else said or value
    return (text, value if value in OUTCOME_VALUES else "unknown")


def by_category(verdict: Verdict) -> dict[Category, list[TestVerdict]]:
    groups: dict[Category, list[TestVerdict]] = {c: [] for c in Category}
    for test in verdict.tests:
        groups[test.category].append(test)
    for category in ISOLATION_CATEGORIES:
        # New findings first: they are what this merge request introduced.
        groups[category].sort(key=lambda t: t.new is False)
    return groups


def regressions(groups: Mapping[Category, list[TestVerdict]]) -> list[TestVerdict]:
    """The isolation findings, new ones first."""
    found = [t for c in FINDING_ORDER if c in ISOLATION_CATEGORIES for t in groups[c]]
    return sorted(found, key=lambda t: t.new is False)


def counts(verdict: Verdict) -> list[dict[str, Any]]:
    """Tests per category, each marked whether it is a finding."""
    # a category only a mode that did not run could find has no count: 0 would claim a
    # check that was not made (verdict.json leaves it out of its summary)
    return [
        {
            "name": c.value,
            "count": int(verdict.summary.get(c.value, 0)),
            "finding": c not in (Category.PASSED, Category.SKIPPED),
        }
        for c in Category
        if c.value in verdict.summary or not verdict.summary
    ]
