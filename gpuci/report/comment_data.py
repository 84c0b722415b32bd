"""The merge-request comment's data: the findings first, each root open with its victims,
their failure messages and its commands; the plain failures after; the rest folded.

A reviewer reads the note to learn who broke whom and how to see it: so each root is told
at once, unfolded, with the victims it broke (each with its outcomes and message) and the
commands that show it; a victim is never repeated as an unrelated row of the failures'
table. Every string here is still untrusted or our own words: the template passes each
through an `md_*` filter (`gpuci.report.escape`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuci.model import Category, TestVerdict, Verdict
from gpuci.report.cards import root_links
from gpuci.report.escape import Md, cut, safe_url
from gpuci.report.rows import (
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
from gpuci.report.timeline import mode_facts, mode_notes
from gpuci.verdict.describe import checked_lines
from gpuci.verdict.roots import (
    Blame,
    Headline,
    blame_of,
    blamed_roots,
    culprit_note,
    root_commands,
    sanitizer_line,
)

MARKER = "<!-- gpuci-report -->"
MAIN_ROWS = 30  # findings in the comment's first table
DETAIL_ROWS = 100  # rows in each collapsed table of the comment
ROOT_LINES = 20  # roots told, unfolded, before the failures' table
ROOT_VICTIMS = 10  # victims listed under one root; the rest are counted
MD_ID_CHARS = 240  # a test id longer than this is cut in the comment
MD_MESSAGE_CHARS = 160
MD_COMMAND_CHARS = 2_000  # a longer reproduce command is left to the HTML report
MAIN_CATEGORIES = (Category.FAILED, Category.CRASHED, Category.TIMED_OUT)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportLinks:
    """Where the comment points: the HTML report, the pipeline and the job (all optional)."""

    report_url: str | None = None
    pipeline_url: str | None = None
    job_url: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RootSection:
    """One root in the comment: `X broke 7 later tests`, its victims, its commands."""

    headline: Headline
    category: str
    new: bool | None
    latent: str  # the order plain pytest did not run that alone showed it, or ""
    sanitizer: str  # the first line of a culprit's compute-sanitizer error, or ""
    victims: tuple[Row, ...]  # each with its outcomes and failure message
    more: int  # victims not listed
    commands: tuple[str, ...]  # comment and command lines, for one fenced block
    left: tuple[str, ...] = ()  # what its culprits left that the victims' failure touches


def markdown_data(
    verdict: Verdict,
    links: ReportLinks,
    *,
    main_rows: int,
    detail_rows: int,
    id_chars: int,
) -> dict[str, Any]:
    """The comment template's data, with at most `main_rows` and `detail_rows` per table."""
    columns = mode_columns(verdict)
    groups = by_category(verdict)
    blames = blamed_roots(verdict)
    blamed = blame_of(blames)
    found = [t for t in regressions(groups) if t.id not in blamed]
    main = [t for t in found if t.new is not False]
    known = [t for t in found if t.new is False]
    main += [t for c in MAIN_CATEGORIES for t in groups[c]]
    shown_roots = blames[: min(ROOT_LINES, main_rows)]
    rootlinks = root_links(blames)

    def section(key: str, title: str, tests: Sequence[TestVerdict], cap: int) -> Section:
        rows = grouped_rows(
            tests,
            lambda t, _: finding_row(
                t,
                columns,
                verdict.modes,
                message_chars=MD_MESSAGE_CHARS,
                root=rootlinks.get(t.id),
                note=culprit_note(t, blamed),
            ),
            apart=rootlinks,
        )
        shown = rows[:cap]
        more = sum(len(r.members) or 1 for r in rows[cap:])  # tests, not rows, left out
        return Section(key=key, title=title, intro="", rows=shown, more=more)

    def victim_row(test: TestVerdict) -> Row:
        return finding_row(test, columns, verdict.modes, message_chars=MD_MESSAGE_CHARS)

    first = section("main", "Failures" if shown_roots else "Findings", main, main_rows)
    details = [
        section("known", "Known isolation problems", known, detail_rows),
        section("flaky", "Flaky tests", groups[Category.FLAKY], detail_rows),
        section("not-run", "Not run", groups[Category.NOT_RUN], detail_rows),
    ]
    return {
        "marker": Md(MARKER),
        "emoji": Md(VERDICT_EMOJI.get(verdict.verdict, "❔")),
        "verdict": verdict.verdict,
        "reasons": list(verdict.reasons),
        "all_clear": verdict.verdict == "pass" and not verdict.reasons,
        "roots": [
            _root_section(b, victim_row, min(ROOT_VICTIMS, detail_rows), id_chars)
            for b in shown_roots
        ],
        "left_behind": [] if blames else list(verdict.left_behind.items())[:ROOT_LINES],
        "roots_more": len(blames) - len(shown_roots),
        "columns": columns,
        "main": first,
        "reproduce": _reproduce(first.rows, id_chars),
        "details": [d for d in details if d.rows or d.more],
        "counts": counts(verdict),
        "plain_counts": plain_counts(verdict),  # pytest's own words, beside the categories
        "total": len(verdict.tests),
        "notes": mode_notes(verdict),
        "facts": mode_facts(verdict),
        "checked": checked_lines(verdict.checked),
        "links": ReportLinks(
            report_url=safe_url(links.report_url),
            pipeline_url=safe_url(links.pipeline_url),
            job_url=safe_url(links.job_url),
        ),
        "id_chars": id_chars,
        "message_chars": MD_MESSAGE_CHARS,
    }


def _root_section(
    blame: Blame, row_of: Callable[[TestVerdict], Row], victims: int, id_chars: int
) -> RootSection:
    errors = [sanitizer_line(t.sanitizer) for t in blame.culprits if t and t.sanitizer]
    return RootSection(
        headline=blame.headline,
        category=blame.root.category.value,
        new=blame.new,
        latent=blame.latent,
        sanitizer=errors[0] if errors else "",
        victims=tuple(row_of(v) for v in blame.victims[:victims]),
        more=max(0, len(blame.victims) - victims),
        commands=_command_lines(root_commands(blame), id_chars),
        left=blame.root.left,
    )


def _reproduce(rows: Sequence[Row], id_chars: int) -> tuple[str, ...]:
    """Comment and command lines for the failures' table: each finding's command."""
    found = [(r.id, r.reproduce) for r in rows]
    found += [(f"{r.id} passes after its provider", r.with_provider) for r in rows]
    return _command_lines(found, id_chars)


def _command_lines(found: Sequence[tuple[str, str]], id_chars: int) -> tuple[str, ...]:
    """`# what it shows` above each command; a command too long for a note is left to the
    HTML report."""
    return tuple(
        line
        for title, command in found
        if command
        for line in (
            f"# {cut(title, id_chars)}",
            command if len(command) <= MD_COMMAND_CHARS else "# (too long: see the report)",
        )
    )
