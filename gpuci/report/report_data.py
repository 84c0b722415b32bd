"""The report's data: a verdict shaped into plain rows and sections for the two templates.

The HTML report's data is here; the comment's is `gpuci.report.comment_data`'s, from the same
rows (`gpuci.report.rows`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuci.model import ISOLATION_CATEGORIES, Category, TestVerdict, Verdict
from gpuci.report.cards import root_cards, root_links, row_anchors
from gpuci.report.escape import safe_url
from gpuci.report.rows import (
    HTML_MESSAGE_CHARS,
    VERDICT_EMOJI,
    Row,
    Section,
    by_category,
    counts,
    finding_row,
    grouped_rows,
    mode_columns,
    regressions,
)
from gpuci.report.summary import plain_counts
from gpuci.report.timeline import durations, mode_facts, mode_notes, timeline
from gpuci.verdict.describe import checked_lines
from gpuci.verdict.roots import blame_of, blamed_roots, culprit_note

HTML_LOG_CHARS = 12_000  # the tail of a crash's log shown in the report
HTML_OPEN_LOGS = 10  # crash logs shown unfolded; the rest sit in a closed <details>
HTML_LAZY_ROWS = 1_000  # with more finding rows, sections are laid out only when seen
MAIN_CATEGORIES = (Category.FAILED, Category.CRASHED, Category.TIMED_OUT)
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


@dataclass(slots=True, kw_only=True)
class _Group:
    """Passed or skipped tests of one file, shown as a compact list."""

    file: str
    category: str
    names: list[str] = field(default_factory=list)


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
        "plain_counts": plain_counts(verdict),  # pytest's own words, beside the categories
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
