"""Render `verdict.json` as a self-contained HTML report and a GitLab merge-request comment.

Both outputs show untrusted text: test ids, messages and logs come from the code under
test. The HTML relies on Jinja2's autoescaping plus a Content-Security-Policy that lets
only the report's own inline script and style run (by their SHA-256 hashes: the file is
static, so a nonce would add nothing a hash does not, and a hash keeps the output
deterministic). Nothing is loaded from the network: `default-src 'none'`.

The Markdown follows what GitLab's renderer (Comrak, then the Banzai filters) does:

- GitLab's reference filters (`@user`, `#1`, `!2`, `~label`, `%milestone`, `$snippet`,
  `&epic`) and its URL autolinker skip text inside `<code>`, `<pre>` and `<a>`;
  Comrak's autolink extension (`https://…`, `www.…`, `a@b.c`) skips code spans too.
- Inside a code span nothing is Markdown: no HTML, no entities, no emphasis, no links.
  A code span ends at the first backtick run as long as its opening one, so a fence
  longer than every run inside cannot be closed early.
- In a table, `|` splits cells even inside a code span unless escaped as `\\|` (the GFM
  table extension removes the backslash again before the cell is parsed).

So every untrusted string goes into a code span, with newlines and control characters
flattened, `|` escaped in table cells, and a fence longer than any backtick run inside.
Plain text outside code spans is our own words and numbers only; the Markdown template
cannot print a string that did not pass one of the `md_*` filters (see `_md_finalize`).
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import re
import signal
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import jinja2
from markupsafe import Markup

from gpuci.model import (
    ISOLATION_CATEGORIES,
    Category,
    FileStatus,
    Mode,
    Outcome,
    TestVerdict,
    Verdict,
    read_verdict,
)

HTML_TEMPLATE = "report.html.j2"
MARKDOWN_TEMPLATE = "comment.md.j2"
MARKER = "<!-- gpuci-report -->"

# GitLab refuses notes over 1,000,000 characters; stay far below so that a comment
# never fails to post and never makes the merge-request page slow to load.
MARKDOWN_MAX_CHARS = 400_000
MAIN_ROWS = 30  # findings in the comment's first table
DETAIL_ROWS = 100  # rows in each collapsed table of the comment
MD_ID_CHARS = 240  # a test id longer than this is cut in the comment
MD_MESSAGE_CHARS = 160
MD_COMMAND_CHARS = 2_000  # a longer reproduce command is left to the HTML report

HTML_MESSAGE_CHARS = 2_000
HTML_LOG_CHARS = 12_000  # the tail of a crash's log shown in the report
HTML_OPEN_LOGS = 10  # crash logs shown unfolded; the rest sit in a closed <details>
HTML_LAZY_ROWS = 1_000  # with more finding rows, sections are laid out only when seen

TIMELINE_WIDTH = 1000.0  # SVG user units of the plot area
TIMELINE_LABEL = 170.0
TIMELINE_ROW = 22.0
TIMELINE_AXIS = 26.0

VERDICT_EMOJI = {"pass": "✅", "warn": "⚠️", "fail": "❌"}
MAIN_CATEGORIES = (Category.FAILED, Category.CRASHED, Category.TIMED_OUT)
OUTCOME_VALUES = frozenset(o.value for o in Outcome)
FINDING_ORDER = (
    Category.ORDER_DEPENDENT,
    Category.DEPENDS_ON_OTHERS,
    Category.CONCURRENCY,
    Category.FAILED,
    Category.CRASHED,
    Category.TIMED_OUT,
    Category.FLAKY,
    Category.NOT_RUN,
)

_TEMPLATE_DIRS = (Path(__file__).parent / "templates", Path(__file__).parent.parent / "templates")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_LINE_BREAKS = re.compile(r"\r\n|[\r\n\u0085\u2028\u2029]")
_PLAIN_MD = re.compile("[A-Za-z0-9 ,;:()'=+\u00d7\u2013-]*")  # and the times and en-dash signs
_SAFE_URL = re.compile(r"https?://[^\s<>()\[\]{}\"'`\\|^]+", re.ASCII)
_SIGNAL = re.compile(r"\b(?:signal\s+(\d+)|(SIG[A-Z0-9]+))")
_EXIT = re.compile(r"\bexit(?:ed)?(?:\s+with)?\s+(?:code|status)\s+(-?\d+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportLinks:
    """Where the comment points: the HTML report, the pipeline and the job (all optional)."""

    report_url: str | None = None
    pipeline_url: str | None = None
    job_url: str | None = None


def links_from_env(environ: Mapping[str, str], html_path: str) -> ReportLinks:
    """The comment's links from GitLab CI's variables; anything but an http(s) URL is dropped."""
    job_url = _safe_url(environ.get("CI_JOB_URL"))
    report_url = None
    path = html_path.replace(os.sep, "/").lstrip("/")
    while path.startswith("./"):
        path = path[2:]
    if job_url and path and ".." not in path.split("/"):
        report_url = _safe_url(f"{job_url.rstrip('/')}/artifacts/file/{quote(path, safe='/')}")
    return ReportLinks(
        report_url=report_url,
        pipeline_url=_safe_url(environ.get("CI_PIPELINE_URL")),
        job_url=job_url,
    )


def render_html(verdict: Verdict) -> str:
    """The self-contained HTML report of a verdict."""
    return _environment(html=True).get_template(HTML_TEMPLATE).render(_html_data(verdict))


def render_markdown(verdict: Verdict, *, links: ReportLinks) -> str:
    """The merge-request comment of a verdict, cut to fit well inside GitLab's note limit."""
    template = _environment(html=False).get_template(MARKDOWN_TEMPLATE)
    main_rows, detail_rows, id_chars = MAIN_ROWS, DETAIL_ROWS, MD_ID_CHARS
    while True:
        text = template.render(
            _markdown_data(
                verdict, links, main_rows=main_rows, detail_rows=detail_rows, id_chars=id_chars
            )
        )
        if len(text) <= MARKDOWN_MAX_CHARS or (main_rows, detail_rows) == (0, 0):
            return text
        # Only pathological ids (huge, full of backticks) get here: show fewer rows.
        main_rows, detail_rows, id_chars = main_rows // 2, detail_rows // 2, max(40, id_chars // 2)


def write_reports(
    verdict_path: Path,
    *,
    html: Path | None,
    markdown: Path | None,
    environ: Mapping[str, str],
) -> tuple[Path, Path]:
    """Render both reports of `verdict_path` (default: beside it) and write them atomically."""
    verdict = read_verdict(verdict_path)
    html = html if html is not None else verdict_path.parent / "report.html"
    markdown = markdown if markdown is not None else verdict_path.parent / "comment.md"
    links = links_from_env(environ, _artifact_path(html, environ))
    _write_text_atomic(html, render_html(verdict))
    _write_text_atomic(markdown, render_markdown(verdict, links=links))
    return html, markdown


# --- escaping ---------------------------------------------------------------------------


class _Md(str):
    """Text already made safe for GitLab Markdown by one of the `md_*` filters."""

    __slots__ = ()


def md_code(text: object, *, table: bool = False, limit: int | None = None) -> str:
    """`text` as one inline code span that no Markdown, HTML or GitLab reference escapes."""
    flat = _flatten(str(text))
    if limit is not None:
        flat = _cut(flat, limit)
    if not flat.strip():
        return _Md("` `" if flat else "")
    if table:
        flat = flat.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    # CommonMark strips one space at each end when both ends have one: pad only where a
    # backtick or a space at an end would otherwise be eaten or merge with the fence.
    if flat[0] in "` " or flat[-1] in "` ":
        flat = f" {flat} "
    return _Md(f"{fence}{flat}{fence}")


def md_cell(text: object, limit: int | None = None) -> str:
    """`text` as a code span that is safe inside a GFM table cell."""
    return md_code(text, table=True, limit=limit)


def md_text(text: object, *, table: bool = False) -> str:
    """Our own plain words as they are; anything that Markdown or GitLab could read as syntax
    (links, references, mentions, emphasis, HTML) goes into a code span instead."""
    value = str(text)
    if _PLAIN_MD.fullmatch(value):
        return _Md(value)
    return md_code(value, table=table)


def md_plain(text: object) -> str:
    """Our own words where even a code span would not be safe (inside raw HTML such as
    `<summary>`): refuse anything but letters, digits and plain punctuation."""
    value = str(text)
    if not _PLAIN_MD.fullmatch(value):
        raise ValueError(f"not plain text: {value[:40]!r}")
    return _Md(value)


def md_url(url: object) -> str:
    """An http(s) URL for a Markdown link target, or nothing when it is not one."""
    return _Md(_safe_url(str(url)) or "")


def md_fence(lines: Iterable[object], info: str = "") -> str:
    """Lines of untrusted text as one fenced code block that no line inside can close."""
    flat = [_flatten(str(line)) for line in lines]
    longest = max((len(r) for line in flat for r in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return _Md("\n".join([fence + info, *flat, fence]))


def _md_finalize(value: object) -> object:
    """Refuse to print into Markdown any string that no `md_*` filter has made safe."""
    if isinstance(value, _Md | int | float | Markup) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        raise TypeError(f"comment template printed unescaped text {value[:40]!r}: use md_cell")
    raise TypeError(f"comment template printed a {type(value).__name__}")


def _cut(text: str, limit: int) -> str:
    """`text`, cut to at most `limit` characters with an ellipsis."""
    return text if len(text) <= limit else text[: max(1, limit - 1)] + "…"


def _flatten(text: str) -> str:
    """One line of text: no ANSI colours, line breaks as ⏎, other control characters as spaces."""
    text = _ANSI.sub("", text)
    text = _LINE_BREAKS.sub(" ⏎ ", text.replace("\t", " "))
    return _CONTROL.sub(" ", text)


def _clean_log(text: str, limit: int) -> str:
    """A log's tail for a <pre>: ANSI colours gone, at most `limit` characters."""
    text = _CONTROL.sub("", _ANSI.sub("", text.replace("\r\n", "\n")).replace("\t", "    "))
    if len(text) > limit:
        cut = text[-limit:]
        text = "… (earlier lines cut)\n" + cut[cut.find("\n") + 1 :]
    return text


def _safe_url(url: str | None) -> str | None:
    """`url` if it is a plain http(s) URL that cannot break out of Markdown or HTML, else None."""
    if not url or not _SAFE_URL.fullmatch(url):
        return None
    parts = urlsplit(url)
    return url if parts.scheme in ("http", "https") and parts.netloc else None


def csp_hash(source: str) -> str:
    """The CSP source expression that allows exactly this inline script or style."""
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


# --- templates -------------------------------------------------------------------------

_ENVIRONMENTS: dict[bool, jinja2.Environment] = {}


def _environment(*, html: bool) -> jinja2.Environment:
    """The Jinja2 environment for HTML (autoescaped) or Markdown (md_* filters enforced)."""
    env = _ENVIRONMENTS.get(html)
    if env is not None:
        return env
    dirs = [str(d) for d in _TEMPLATE_DIRS if d.is_dir()]
    if not dirs:
        raise FileNotFoundError(f"gpuci's templates are missing: looked in {_TEMPLATE_DIRS}")
    finalize: Callable[[object], object] | None = None if html else _md_finalize
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(dirs),
        # The comment is Markdown, not HTML: the md_* filters escape it, and _md_finalize
        # makes sure that nothing reaches it without them.
        autoescape=html,  # noqa: S701
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=finalize,
    )
    env.filters.update(
        md_code=md_code,
        md_cell=md_cell,
        md_text=md_text,
        md_plain=md_plain,
        md_url=md_url,
        md_fence=md_fence,
        csp_hash=csp_hash,
    )
    _ENVIRONMENTS[html] = env
    return env


# --- plain data for the templates -----------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Row:
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


@dataclass(frozen=True, slots=True, kw_only=True)
class _Section:
    key: str
    title: str
    intro: str
    rows: Sequence[_Row]
    categories: tuple[str, ...] = ()
    more: int = 0  # rows left out (the comment only)


@dataclass(slots=True, kw_only=True)
class _Group:
    """Passed or skipped tests of one file, shown as a compact list."""

    file: str
    category: str
    names: list[str] = field(default_factory=list)


def _mode_columns(verdict: Verdict) -> list[str]:
    """The modes to show, in pipeline order, then any unknown ones by name."""
    seen = set(verdict.modes)
    for test in verdict.tests:
        seen.update(test.outcomes)
    known = [m.value for m in Mode if m.value in seen]
    return known + sorted(seen - set(known))


def _badge(test: TestVerdict) -> str:
    if test.category not in ISOLATION_CATEGORIES or test.new is None:
        return ""
    return "new" if test.new else "known"


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
        for run in _file_runs(modes.get(mode)):
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


def _row(
    test: TestVerdict,
    columns: Sequence[str],
    modes: Mapping[str, Any],
    *,
    message_chars: int,
    log_chars: int = 0,
    log_open: bool = False,
) -> _Row:
    message = _cut(test.message, message_chars)
    crashed = test.category in (Category.CRASHED, Category.TIMED_OUT)
    return _Row(
        id=test.id,
        file=test.file,
        category=test.category.value,
        badge=_badge(test),
        outcomes=tuple(_outcome(test.outcomes.get(mode, "")) for mode in columns),
        reruns=_reruns(test.reruns),
        message=message,
        reproduce=test.reproduce,
        cause=_crash_cause(test, modes) if test.category is Category.CRASHED else "",
        log=_clean_log(test.log, log_chars) if crashed and log_chars and test.log else "",
        log_open=log_open,
    )


def _outcome(value: str) -> tuple[str, str]:
    """An outcome's text and CSS class; one we do not know gets a neutral class."""
    if not value:
        return ("", "none")
    return (value, value if value in OUTCOME_VALUES else "unknown")


def _by_category(verdict: Verdict) -> dict[Category, list[TestVerdict]]:
    groups: dict[Category, list[TestVerdict]] = {c: [] for c in Category}
    for test in verdict.tests:
        groups[test.category].append(test)
    for category in ISOLATION_CATEGORIES:
        # New findings first: they are what this merge request introduced.
        groups[category].sort(key=lambda t: t.new is False)
    return groups


def _regressions(groups: Mapping[Category, list[TestVerdict]]) -> list[TestVerdict]:
    found = [t for c in FINDING_ORDER if c in ISOLATION_CATEGORIES for t in groups[c]]
    return sorted(found, key=lambda t: t.new is False)


def _counts(verdict: Verdict) -> list[dict[str, Any]]:
    return [
        {
            "name": c.value,
            "count": int(verdict.summary.get(c.value, 0)),
            "finding": c not in (Category.PASSED, Category.SKIPPED),
        }
        for c in Category
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
            "url": _safe_url(str(env[k])) if k.endswith("_url") else None,
        }
        for k in keys
    ]


def _file_runs(mode: Any) -> list[Mapping[str, Any]]:
    """A mode's `file_runs`, keeping only well-formed entries."""
    if not isinstance(mode, Mapping):
        return []
    runs = mode.get("file_runs")
    if not isinstance(runs, list):
        return []
    return [r for r in runs if isinstance(r, Mapping) and isinstance(r.get("file"), str)]


def _number(value: Any, default: float = 0.0) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def _status(value: Any) -> str:
    """A file status we have a colour for, `unknown` otherwise (it names a CSS class)."""
    statuses = {s.value for s in FileStatus}
    return value if isinstance(value, str) and value in statuses else "unknown"


def _seconds(value: float) -> str:
    if value >= 120:
        return f"{int(value // 60)}m{value % 60:04.1f}s"
    return f"{value:.2f}s" if value < 10 else f"{value:.1f}s"


def _ticks(end: float) -> list[float]:
    """About six round tick values from 0 to `end` seconds."""
    if end <= 0:
        return [0.0]
    raw = end / 6
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [i * step for i in range(int(end // step) + 1)]


def _timeline(verdict: Verdict) -> dict[str, Any] | None:
    """The parallel run as rows of bars, in SVG user units; None without a parallel run."""
    mode = verdict.modes.get(Mode.PARALLEL.value)
    runs = _file_runs(mode)
    if not runs:
        return None
    shards = {r.get("shard") for r in runs}

    def lane(run: Mapping[str, Any]) -> tuple[str, str, int]:
        shard = "" if len(shards) < 2 else str(run.get("shard") or "")
        gpu = run.get("gpu")
        return (shard, "" if gpu is None else str(gpu), int(_number(run.get("slot"))))

    lanes = sorted({lane(r) for r in runs}, key=lambda k: (k[0].zfill(6), k[1].zfill(6), k[2]))
    index = {key: i for i, key in enumerate(lanes)}
    # The axis ends with the last file: the alone-reruns after it are not drawn.
    end = max(_number(r.get("end")) for r in runs) or 1.0
    wall = _number(mode.get("wall_s")) if isinstance(mode, Mapping) else 0.0
    scale = TIMELINE_WIDTH / end
    rows = []
    previous_group = None
    for i, (shard, gpu, slot) in enumerate(lanes):
        group = " · ".join(
            p for p in (f"shard {shard}" if shard else "", f"GPU {gpu}" if gpu else "") if p
        )
        rows.append(
            {
                "y": i * TIMELINE_ROW,
                "text_y": i * TIMELINE_ROW + TIMELINE_ROW / 2 + 4,
                "label": f"slot {slot}",
                "group": group if group != previous_group else "",
                "separator": i > 0 and group != previous_group,
            }
        )
        previous_group = group
    bars = []
    for run in sorted(runs, key=lambda r: _number(r.get("start"))):
        start, stop = _number(run.get("start")), _number(run.get("end"))
        status = _status(run.get("status"))
        bars.append(
            {
                "x": round(TIMELINE_LABEL + start * scale, 2),
                "y": index[lane(run)] * TIMELINE_ROW + 3,
                "width": round(max((stop - start) * scale, 1.5), 2),
                "status": status,
                "title": f"{run['file']} — {status}, {_seconds(start)} → {_seconds(stop)}"
                f" ({_seconds(stop - start)})",
            }
        )
    height = len(lanes) * TIMELINE_ROW
    return {
        "width": TIMELINE_LABEL + TIMELINE_WIDTH + 20,
        "height": height + TIMELINE_AXIS,
        "plot_height": height,
        "label_x": TIMELINE_LABEL - 8,
        "tick_y": height + 16,
        "row_height": TIMELINE_ROW - 6,
        "rows": rows,
        "bars": bars,
        "ticks": [
            {"x": round(TIMELINE_LABEL + t * scale, 2), "label": _seconds(t)} for t in _ticks(end)
        ],
        "statuses": sorted({b["status"] for b in bars}),
        "wall": _seconds(max(wall, end)),
        "workers": mode.get("workers") if isinstance(mode, Mapping) else None,
    }


def _durations(verdict: Verdict, columns: Sequence[str]) -> dict[str, Any]:
    """Per file, its duration and status in each mode, slowest file first."""
    table: dict[str, dict[str, tuple[float, str]]] = {}
    for mode in columns:
        for run in _file_runs(verdict.modes.get(mode)):
            start, stop = _number(run.get("start")), _number(run.get("end"))
            duration = _number(run.get("duration"), stop - start)
            before = table.setdefault(run["file"], {}).get(mode)
            if before is not None:  # the same file in several shards or reruns: add up
                duration += before[0]
            table[run["file"]][mode] = (duration, _status(run.get("status")))
    modes = [m for m in columns if any(m in cells for cells in table.values())]
    ordered = sorted(table.items(), key=lambda kv: (-max(d for d, _ in kv[1].values()), kv[0]))
    rows = [
        {
            "file": file,
            "cells": [
                {"text": _seconds(cells[m][0]), "status": cells[m][1]} if m in cells else None
                for m in modes
            ],
        }
        for file, cells in ordered
    ]
    walls = [
        _seconds(_number(verdict.modes[m].get("wall_s")))
        if isinstance(verdict.modes.get(m), Mapping)
        else ""
        for m in modes
    ]
    return {"modes": modes, "rows": rows, "walls": walls}


def _mode_notes(verdict: Verdict) -> list[str]:
    """Warnings about incomplete modes: missing shards, interrupted runs."""
    notes = []
    for name, mode in verdict.modes.items():
        if not isinstance(mode, Mapping):
            continue
        missing = mode.get("missing_shards") or []
        if missing:
            notes.append(f"{name}: shard(s) {', '.join(map(str, missing))} missing")
        if mode.get("interrupted"):
            notes.append(f"{name}: the run was interrupted")
    return notes


def _compact(tests: Iterable[TestVerdict], category: str) -> list[_Group]:
    groups: dict[str, _Group] = {}
    for test in tests:
        group = groups.setdefault(test.file, _Group(file=test.file, category=category))
        prefix = f"{test.file}::"
        group.names.append(test.id[len(prefix) :] if test.id.startswith(prefix) else test.id)
    return sorted(groups.values(), key=lambda g: g.file)


def _html_data(verdict: Verdict) -> dict[str, Any]:
    columns = _mode_columns(verdict)
    groups = _by_category(verdict)

    def rows(tests: Iterable[TestVerdict], logs: bool = False) -> list[_Row]:
        return [
            _row(
                t,
                columns,
                verdict.modes,
                message_chars=HTML_MESSAGE_CHARS,
                log_chars=HTML_LOG_CHARS if logs else 0,
                log_open=logs and i < HTML_OPEN_LOGS,
            )
            for i, t in enumerate(tests)
        ]

    sections = [
        _Section(
            key="regressions",
            title="Isolation regressions",
            intro="Pass alone in a fresh interpreter, fail only together with other tests"
            " (order-dependent, depends-on-others) or beside other processes (concurrency).",
            rows=rows(_regressions(groups)),
            categories=tuple(sorted(c.value for c in ISOLATION_CATEGORIES)),
        ),
        _Section(
            key="failed",
            title="Failures",
            intro="Fail alone in a fresh interpreter too: real failures, not isolation.",
            rows=rows(groups[Category.FAILED]),
            categories=(Category.FAILED.value,),
        ),
        _Section(
            key="crashed",
            title="Crashes",
            intro="The interpreter died while the test ran; the run resumed after it.",
            rows=rows(groups[Category.CRASHED], logs=True),
            categories=(Category.CRASHED.value,),
        ),
        _Section(
            key="timed-out",
            title="Timeouts",
            intro="Still running when the time limit struck; the run resumed after it.",
            rows=rows(groups[Category.TIMED_OUT], logs=True),
            categories=(Category.TIMED_OUT.value,),
        ),
        _Section(
            key="flaky",
            title="Flaky tests",
            intro="Both passed and failed under identical conditions.",
            rows=rows(groups[Category.FLAKY]),
            categories=(Category.FLAKY.value,),
        ),
        _Section(
            key="not-run",
            title="Not run",
            intro="Collected, but no mode ran them.",
            rows=rows(groups[Category.NOT_RUN]),
            categories=(Category.NOT_RUN.value,),
        ),
    ]
    return {
        "lazy": sum(len(s.rows) for s in sections) > HTML_LAZY_ROWS,
        "verdict": verdict.verdict,
        "verdict_class": verdict.verdict if verdict.verdict in VERDICT_EMOJI else "unknown",
        "reasons": list(verdict.reasons),
        "all_clear": verdict.verdict == "pass" and not verdict.reasons,
        "counts": _counts(verdict),
        "total": len(verdict.tests),
        "categories": [c.value for c in Category],
        "columns": columns,
        "sections": [s for s in sections if s.rows],
        "empty_sections": [s.title for s in sections if not s.rows],
        "compact": _compact(groups[Category.PASSED], Category.PASSED.value)
        + _compact(groups[Category.SKIPPED], Category.SKIPPED.value),
        "passed": len(groups[Category.PASSED]),
        "skipped": len(groups[Category.SKIPPED]),
        "timeline": _timeline(verdict),
        "durations": _durations(verdict, columns),
        "notes": _mode_notes(verdict),
        "environment": _environment_rows(verdict),
        "title": verdict.environment.get("commit", ""),
    }


def _markdown_data(
    verdict: Verdict,
    links: ReportLinks,
    *,
    main_rows: int,
    detail_rows: int,
    id_chars: int,
) -> dict[str, Any]:
    columns = _mode_columns(verdict)
    groups = _by_category(verdict)
    regressions = _regressions(groups)
    main = [t for t in regressions if t.new is not False]
    main += [t for c in MAIN_CATEGORIES for t in groups[c]]
    known = [t for t in regressions if t.new is False]

    def section(key: str, title: str, tests: Sequence[TestVerdict], cap: int) -> _Section:
        shown = [
            _row(t, columns, verdict.modes, message_chars=MD_MESSAGE_CHARS) for t in tests[:cap]
        ]
        return _Section(key=key, title=title, intro="", rows=shown, more=len(tests) - len(shown))

    first = section("main", "Needs attention", main, main_rows)
    reproduce = [
        line
        for r in first.rows
        if r.reproduce
        for line in (
            f"# {_cut(r.id, id_chars)}",
            r.reproduce if len(r.reproduce) <= MD_COMMAND_CHARS else "# (too long: see the report)",
        )
    ]
    details = [
        section("known", "Known isolation regressions", known, detail_rows),
        section("flaky", "Flaky tests", groups[Category.FLAKY], detail_rows),
        section("not-run", "Not run", groups[Category.NOT_RUN], detail_rows),
    ]
    return {
        "marker": _Md(MARKER),
        "emoji": _Md(VERDICT_EMOJI.get(verdict.verdict, "❔")),
        "verdict": verdict.verdict,
        "reasons": list(verdict.reasons),
        "all_clear": verdict.verdict == "pass" and not verdict.reasons,
        "columns": columns,
        "main": first,
        "reproduce": reproduce,
        "details": [d for d in details if d.rows or d.more],
        "counts": _counts(verdict),
        "total": len(verdict.tests),
        "notes": _mode_notes(verdict),
        "links": ReportLinks(
            report_url=_safe_url(links.report_url),
            pipeline_url=_safe_url(links.pipeline_url),
            job_url=_safe_url(links.job_url),
        ),
        "id_chars": id_chars,
        "message_chars": MD_MESSAGE_CHARS,
    }


# --- files ------------------------------------------------------------------------------


def _artifact_path(html: Path, environ: Mapping[str, str]) -> str:
    """The report's path as GitLab's artifact browser names it: relative to the project."""
    base = Path(environ.get("CI_PROJECT_DIR") or Path.cwd())
    try:
        return html.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return html.as_posix() if not html.is_absolute() else html.name


def _write_text_atomic(path: Path, text: str) -> None:
    """Write text so that a reader (or the publish job) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
