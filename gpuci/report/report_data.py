"""The report's data: a verdict shaped into plain rows and sections for the two templates.

The HTML report's data is here; the comment's is `gpuci.report.comment_data`'s, from the same rows.
"""

from __future__ import annotations

import dataclasses
import re
import signal
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuci.model import ISOLATION_CATEGORIES, Category, Mode, Outcome, TestVerdict, Verdict
from gpuci.report.cards import RootLink, badge, root_cards, root_links, row_anchors, sanitizer_block
from gpuci.report.escape import clean_log, cut, safe_url
from gpuci.report.groups import INFERRED_SOUND, FindingGroup, group_findings
from gpuci.report.timeline import durations, file_runs, mode_facts, mode_notes, timeline
from gpuci.verdict.describe import checked_lines
from gpuci.verdict.roots import blame_of, blamed_roots, culprit_note, sanitizer_line

HTML_MESSAGE_CHARS = 2_000
HTML_LOG_CHARS = 12_000  # the tail of a crash's log shown in the report
HTML_OPEN_LOGS = 10  # crash logs shown unfolded; the rest sit in a closed <details>
HTML_LAZY_ROWS = 1_000  # with more finding rows, sections are laid out only when seen
VERDICT_EMOJI = {"pass": "✅", "warn": "⚠️", "fail": "❌"}
MAIN_CATEGORIES = (Category.FAILED, Category.CRASHED, Category.TIMED_OUT)
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

# The HTML report's sections after the isolation problems: category, title, intro, logs.
HTML_SECTIONS = (
    (
        Category.FAILED,
        "Failures",
        "Fail alone in a fresh interpreter too: real failures, not isolation.",
        False,
    ),
    (
        Category.CRASHED,
        "Crashes",
        "The interpreter died while the test ran; the run resumed after it.",
        True,
    ),
    (
        Category.TIMED_OUT,
        "Timeouts",
        "Still running when the time limit struck; the run resumed after it.",
        True,
    ),
    (Category.FLAKY, "Flaky tests", "Both passed and failed under identical conditions.", False),
    (Category.NOT_RUN, "Not run", "Collected, but no mode ran them.", False),
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


@dataclass(slots=True, kw_only=True)
class _Group:
    """Passed or skipped tests of one file, shown as a compact list."""

    file: str
    category: str
    names: list[str] = field(default_factory=list)


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
            _outcome(test.outcomes.get(mode, ""), inferred=mode in test.inferred)
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


def _outcome(value: str, *, inferred: bool = False) -> tuple[str, str]:
    """An outcome's text and CSS class; one we do not know gets a neutral class."""
    if not value:
        return ("", "none")
    if inferred and value not in INFERRED_SOUND:
        # Its file failed alike in every screen, so isolated did not re-run it and took the
        # parallel screen's outcome: a failure nobody saw in isolated, which beside a pass
        # alone reads as a contradiction. Its alone-runs decide; say that it did not run.
        return (NOT_RERUN, "none")
    text = f"{value} (inferred)" if inferred else value
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


def _environment_rows(verdict: Verdict) -> list[dict[str, Any]]:
    labels = {
        "gpu": "GPU",
        "driver": "driver",
        "cuda": "CUDA",
        "cupy": "CuPy",
        "python": "Python",
        "pytest": "pytest",
        "commit": "commit",
        "pipeline_url": "pipeline",
        "job_url": "job",
    }
    env = verdict.environment
    keys = [k for k in labels if k in env] + sorted(k for k in env if k not in labels)
    return [
        {
            "label": labels.get(k, k),
            "value": str(env[k]),
            "url": safe_url(str(env[k])) if k.endswith("_url") else None,
        }
        for k in keys
    ]


def _compact(tests: Iterable[TestVerdict], category: str) -> list[_Group]:
    groups: dict[str, _Group] = {}
    for test in tests:
        group = groups.setdefault(test.file, _Group(file=test.file, category=category))
        prefix = f"{test.file}::"
        group.names.append(test.id[len(prefix) :] if test.id.startswith(prefix) else test.id)
    return sorted(groups.values(), key=lambda g: g.file)


def html_data(verdict: Verdict) -> dict[str, Any]:
    """The HTML template's data: cards of roots, sections of rows, timeline, environment."""
    columns = mode_columns(verdict)
    groups = by_category(verdict)
    blames = blamed_roots(verdict)
    anchors = row_anchors(verdict)
    links = root_links(blames)
    blamed = blame_of(blames)

    def rows(tests: Sequence[TestVerdict], logs: bool = False) -> list[Row]:
        return grouped_rows(
            tests,
            lambda t, i: finding_row(
                t,
                columns,
                verdict.modes,
                message_chars=HTML_MESSAGE_CHARS,
                log_chars=HTML_LOG_CHARS if logs else 0,
                log_open=logs and i < HTML_OPEN_LOGS,
                anchor=anchors.get(t.id, ""),
                root=links.get(t.id),
                note=culprit_note(t, blamed),
            ),
            apart=links,
        )

    cards = root_cards(blames, anchors)
    sections = [
        Section(
            key="regressions",
            title="Isolation problems",
            intro="Pass alone in a fresh interpreter, fail only together with other tests"
            " (order-dependent, depends-on-others), beside other processes (concurrency)"
            " or in several threads at once (thread-unsafe).",
            rows=rows(regressions(groups)),
            categories=tuple(sorted(c.value for c in ISOLATION_CATEGORIES)),
        ),
        *(
            Section(
                key=category.value,
                title=title,
                intro=intro,
                rows=rows(groups[category], logs=logs),
                categories=(category.value,),
            )
            for category, title, intro, logs in HTML_SECTIONS
        ),
    ]
    return {
        "lazy": sum(len(s.rows) for s in sections) + len(cards) > HTML_LAZY_ROWS,
        "verdict": verdict.verdict,
        "verdict_class": verdict.verdict if verdict.verdict in VERDICT_EMOJI else "unknown",
        "reasons": list(verdict.reasons),
        "all_clear": verdict.verdict == "pass" and not verdict.reasons,
        "counts": counts(verdict),
        "total": len(verdict.tests),
        "categories": [c.value for c in Category],
        "columns": columns,
        "cards": cards,
        "left_behind": [] if cards else list(verdict.left_behind.items()),  # a clean check's hint
        "card_categories": sorted({c.category for c in cards}),
        "sections": [s for s in sections if s.rows],
        "empty_sections": [s.title for s in sections if not s.rows],
        "compact": _compact(groups[Category.PASSED], Category.PASSED.value)
        + _compact(groups[Category.SKIPPED], Category.SKIPPED.value),
        "passed": len(groups[Category.PASSED]),
        "skipped": len(groups[Category.SKIPPED]),
        "timeline": timeline(verdict),
        "durations": durations(verdict, columns),
        "notes": mode_notes(verdict),
        "facts": mode_facts(verdict),
        "checked": checked_lines(verdict.checked),
        "environment": _environment_rows(verdict),
        "title": verdict.environment.get("commit", ""),
    }
