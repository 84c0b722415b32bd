"""Tests of gpuci/report/render.py: escaping, the golden comment, size caps, the HTML's safety.

The golden comments are tests/data/report/comment_all.md, rendered from verdict_all.json
(a verdict with every category and hostile test ids), and comment_roots.md, from
verdict_roots.json (roots of every kind: a cascade, providers, a concurrency pair, hostile
culprit ids; a diagnosed victim, compute-sanitizer blocks, searches cut by the budget).
After an intended change, rewrite them with `GPUCI_UPDATE_GOLDEN=1 pytest
tests/test_report.py` and review the diff.

Markdown is also rendered the way GitLab renders it: with Comrak (the `comrak` package,
GitLab's Markdown engine) and GitLab's options. Those tests skip where `comrak` is not
installed, except in CI (CI=true), where they fail instead.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jinja2
import pytest

from gpuci.formats import read_verdict, verdict_to_json, write_json_atomic
from gpuci.model import (
    ISOLATION_CATEGORIES,
    Category,
    InputError,
    Outcome,
    Probe,
    Root,
    TestVerdict,
    Verdict,
)
from gpuci.report import render as report
from gpuci.report.comment_data import ROOT_VICTIMS, markdown_data
from gpuci.report.escape import flatten
from gpuci.report.render import (
    MARKDOWN_MAX_CHARS,
    MARKER,
    ReportLinks,
    links_from_env,
    md_cell,
    md_code,
    md_fence,
    md_text,
    render_html,
    render_markdown,
    write_reports,
)
from gpuci.report.report_data import html_data

DATA = Path(__file__).parent / "data" / "report"
VERDICT_ALL = DATA / "verdict_all.json"
GOLDEN_ALL = DATA / "comment_all.md"
VERDICT_ROOTS = DATA / "verdict_roots.json"
GOLDEN_ROOTS = DATA / "comment_roots.md"
LINKS = ReportLinks(
    report_url="https://gitlab.example.com/team/project/-/jobs/7/artifacts/file/out/report.html",
    pipeline_url="https://gitlab.example.com/team/project/-/pipelines/42",
    job_url="https://gitlab.example.com/team/project/-/jobs/7",
)

XSS_ID = "tests/gpu/test_x.py::test_x[<img src=x onerror=alert(1)>]"
HOSTILE = [
    XSS_ID,
    "@all please look",
    "see #123 and !45 and ~bug and %v1 and $7 and &8",
    "a ` single and `` double backtick",
    "`starts and ends with a backtick`",
    "pipe | in | the | middle",
    "back\\slash before a pipe \\| here",
    "first line\nsecond line\r\nthird\rfourth\u2028fifth",
    "https://evil.example/path?q=1",
    "www.evil.example and mail@evil.example",
    "[a](http://x)",
    "![i](http://x)",
    "<script>alert(1)</script>",
    "<!-- comment --> </details> <details>",
    "*emph* _emph_ **strong** ~~strike~~",
    "[[wiki|link]] $`math`$ $x$ :smile:",
    "\x1b[31mred\x1b[0m and a \x00 nul and a \t tab",
    " leading and trailing spaces ",
]


# --- rendering Markdown as GitLab does --------------------------------------------------


def _comrak() -> Any:
    """The comrak module, or a skip (a failure in CI) where it is not installed."""
    try:
        import comrak  # type: ignore[import-not-found]
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("comrak is not installed, and CI must render Markdown as GitLab does")
        pytest.skip("comrak is not installed (pip install comrak): cannot render as GitLab")
    return comrak


def gitlab_html(markdown: str) -> str:
    """`markdown` rendered by Comrak with the options GitLab's GLFM engine uses."""
    comrak = _comrak()
    ext = comrak.ExtensionOptions()
    for name in (
        "alerts",
        "autolink",
        "description_lists",
        "footnotes",
        "math_code",
        "math_dollars",
        "multiline_block_quotes",
        "strikethrough",
        "table",
        "tasklist",
        "wikilinks_title_before_pipe",
    ):
        setattr(ext, name, True)
    parse = comrak.ParseOptions()
    parse.relaxed_autolinks = True
    parse.tasklist_in_table = True
    render = comrak.RenderOptions()
    render.unsafe_ = True  # GitLab renders raw HTML, then sanitizes it
    return str(
        comrak.render_markdown(
            markdown, extension_options=ext, parse_options=parse, render_options=render
        )
    )


class _Tree(HTMLParser):
    """What GitLab's filters would see: tags, and text outside and inside code."""

    # GitLab's reference and autolink filters skip text below these.
    IGNORED = frozenset({"code", "pre", "a", "style", "kbd"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.free_text: list[str] = []  # text GitLab would scan for references and URLs
        self.code: list[str] = []
        self.rows: list[list[str]] = []
        self.items: list[str] = []  # the text of each list item
        self.headings: list[str] = []  # the text of each heading
        self.comments: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "tr":
            self.rows.append([])
        if tag in ("td", "th"):
            self.rows[-1].append("")
        if tag == "li":
            self.items.append("")
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.headings.append("")
        if tag not in ("br", "img", "input", "hr", "meta"):
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.stack:
            while self.stack.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if "code" in self.stack:
            self.code.append(data)
        if not self.IGNORED.intersection(self.stack):
            self.free_text.append(data)
        in_cell = "td" in self.stack or "th" in self.stack
        if in_cell and self.rows:
            self.rows[-1][-1] += data
        if "li" in self.stack:
            self.items[-1] += data
        if {"h1", "h2", "h3", "h4", "h5", "h6"}.intersection(self.stack):
            self.headings[-1] += data

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)


def parse_html(html: str) -> _Tree:
    tree = _Tree()
    tree.feed(html)
    tree.close()
    return tree


REFERENCE = re.compile(r"@\w|#\d|!\d|~\w|%\w|\$\w|&\d|://|www\.|<img|onerror", re.IGNORECASE)


def assert_inert(tree: _Tree) -> None:
    """Nothing GitLab would turn into a mention, reference, link, image or live HTML."""
    free = " ".join(tree.free_text)
    assert not REFERENCE.search(free), free
    bad = [t for t, _ in tree.tags if t in ("img", "script", "iframe", "style", "object", "svg")]
    assert not bad
    assert not [a for _, attrs in tree.tags for a in attrs if a.startswith("on")]


# --- escaping ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE)
def test_md_cell_is_one_line_with_a_fence_longer_than_any_backtick_run(text: str) -> None:
    cell = md_cell(text)
    assert "\n" not in cell and "\r" not in cell and "\u2028" not in cell
    fence = re.match(r"`+", cell)
    assert fence, cell
    inside = cell[len(fence.group()) : -len(fence.group())]
    assert cell.endswith(fence.group())
    assert max((len(r) for r in re.findall(r"`+", inside)), default=0) < len(fence.group())
    # Every pipe is escaped, so no cell can be split.
    assert re.search(r"(?<!\\)\|", inside) is None


@pytest.mark.parametrize("text", HOSTILE)
def test_md_cell_renders_as_literal_code_in_one_table_cell(text: str) -> None:
    markdown = f"| a | b | c |\n| --- | --- | --- |\n| x | {md_cell(text)} | y |\n"
    tree = parse_html(gitlab_html(markdown))
    assert_inert(tree)
    assert tree.rows == [["a", "b", "c"], ["x", tree.rows[1][1], "y"]]
    shown = tree.rows[1][1]
    expected = flatten(text).strip()
    if "\\|" in text:
        # GFM unescapes `\|` inside a cell; a backslash written before a pipe may show doubled.
        shown = shown.replace("\\\\|", "\\|")
    assert shown.strip() == expected


@pytest.mark.parametrize("text", HOSTILE)
def test_md_code_renders_as_literal_code_in_a_paragraph(text: str) -> None:
    tree = parse_html(gitlab_html(f"- before {md_code(text)} after\n"))
    assert_inert(tree)
    assert "".join(tree.code).strip() == flatten(text).strip()


def test_md_code_details() -> None:
    assert md_code("x") == "`x`"
    assert md_code("a`b") == "``a`b``"
    assert md_code("`a`") == "`` `a` ``"
    assert md_code("a\nb") == "`a ⏎ b`"
    assert md_code("") == ""
    assert md_cell("a|b") == "`a\\|b`"
    assert md_code("a|b") == "`a|b`"  # outside a table a backslash would show
    assert md_cell("x" * 50, limit=10) == "`xxxxxxxxx…`"


def test_md_text_keeps_plain_words_and_fences_anything_else() -> None:
    assert md_text("2 new isolation regressions, 1 crashed test") == (
        "2 new isolation regressions, 1 crashed test"
    )
    for text in ("@all", "see #12", "[a](http://x)", "https://x", "a_b", "<b>", "x!1", "a.com"):
        assert md_text(text).startswith("`"), text


def test_md_fence_cannot_be_closed_from_inside() -> None:
    lines = ["```", "````sh", "ok", "</details>", "a\nb"]
    block = md_fence(lines, "sh")
    tree = parse_html(gitlab_html(f"<details><summary>x</summary>\n\n{block}\n\n</details>\n"))
    assert_inert(tree)
    assert block.splitlines()[0] == "`````sh"
    assert "".join(tree.code) == "```\n````sh\nok\n</details>\na ⏎ b\n"


def test_the_comment_template_cannot_print_unescaped_text() -> None:
    env = report._environment(html=False)
    with pytest.raises(TypeError, match="unescaped"):
        env.from_string("{{ x }}").render(x="@all")
    assert env.from_string("{{ x|md_cell }} {{ n }}").render(x="@all", n=3) == "`@all` 3"
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ missing|md_cell }}").render()


# --- the comment ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "golden"), [(VERDICT_ALL, GOLDEN_ALL), (VERDICT_ROOTS, GOLDEN_ROOTS)]
)
def test_comment_matches_the_golden_file(verdict: Path, golden: Path) -> None:
    markdown = render_markdown(read_verdict(verdict), links=LINKS)
    if os.environ.get("GPUCI_UPDATE_GOLDEN") == "1":
        golden.write_text(markdown, encoding="utf-8")
    assert markdown == golden.read_text(encoding="utf-8")


def test_comment_starts_with_the_marker_and_the_verdict() -> None:
    lines = render_markdown(read_verdict(VERDICT_ALL), links=LINKS).splitlines()
    assert lines[0] == MARKER
    assert lines[1].startswith("### ❌ gpuci: fail: ")


def test_comment_rendered_by_gitlab_is_inert_and_its_tables_are_whole() -> None:
    verdict = read_verdict(VERDICT_ALL)
    tree = parse_html(gitlab_html(render_markdown(verdict, links=LINKS)))
    assert_inert(tree)
    hrefs = [attrs.get("href") for tag, attrs in tree.tags if tag == "a"]
    assert hrefs == [LINKS.report_url, LINKS.job_url, LINKS.pipeline_url]
    widths = {len(row) for row in tree.rows if len(row) != 11}  # 11: the counts table
    assert widths == {8}, tree.rows  # category, test, 4 modes, reruns, message (no roots)
    shown = "\n".join(tree.code)
    for test in verdict.tests:
        if test.category not in (Category.PASSED, Category.SKIPPED):
            assert test.id in shown, test.id
    assert "<img src=x onerror=alert(1)>" in shown
    assert tree.comments == [" gpuci-report "]


def test_comment_rendered_by_gitlab_says_pytests_counts_below_the_table_not_in_it() -> None:
    # the line right after a table's last row, with no blank line between, is one more row
    verdict = read_verdict(VERDICT_ALL)
    said = "1 failed, 3 passed, 2 skipped"
    verdict = replace(verdict, modes={**verdict.modes, "suite": {"counts": said}})
    tree = parse_html(gitlab_html(render_markdown(verdict, links=LINKS)))
    assert not [row for row in tree.rows if any(said in cell for cell in row)], tree.rows
    assert f"pytest (suite): {said}" in "".join(tree.free_text)


def test_comment_puts_new_regressions_first_and_known_ones_in_details() -> None:
    markdown = render_markdown(read_verdict(VERDICT_ALL), links=LINKS)
    main, _, rest = markdown.partition("<details><summary>Known isolation problems (2)")
    assert "test_rows[fp16]" in main and "test_uninit_buffer" in main
    assert "test_concurrent_alloc" not in main and "test_concurrent_alloc" in rest
    assert main.index("🆕 order-dependent") < main.index("| failed |") < main.index("| crashed |")
    assert "signal 11 (SIGSEGV)" in main
    assert "<details><summary>Flaky tests (1)</summary>" in rest


def test_comment_without_links_or_findings() -> None:
    verdict = Verdict(
        verdict="pass",
        summary={"passed": 1},
        tests=(
            TestVerdict(
                id="t.py::test_a",
                file="t.py",
                category=Category.PASSED,
                outcomes={"suite": "passed"},
            ),
        ),
    )
    markdown = render_markdown(verdict, links=ReportLinks())
    assert "### ✅ gpuci: pass\n" in markdown
    assert "No isolation problems, failures, crashes or timeouts." in markdown
    assert "| category | test |" not in markdown and "<details>" not in markdown
    assert "`report.html` in the job's artifacts" in markdown
    assert "](" not in markdown


def test_comment_drops_links_that_are_not_http() -> None:
    links = ReportLinks(
        report_url="javascript:alert(1)",
        pipeline_url="https://ok.example/p) [x](https://evil",
        job_url="https://ok.example/j",
    )
    markdown = render_markdown(read_verdict(VERDICT_ALL), links=links)
    (line,) = [line for line in markdown.splitlines() if line.startswith("📄")]
    assert (
        line
        == "📄 Full HTML report: `report.html` in the job's artifacts · [job](https://ok.example/j)"
    )


# --- roots in the comment -----------------------------------------------------------------

OOB = "tests/gpu/test_oob.py::test_scatter_oob"
EVIL_A = "tests/gpu/test_evil.py::test_a[<img src=x onerror=alert(1)>]"
EVIL_B = "tests/gpu/test_evil.py::test_b[@all `tick` a|b ``two``]"
UNINITIALIZED = "reads uninitialized device memory (fails alone with poisoned allocations)"
SANITIZER_LINE = "Invalid __global__ write of size 4 bytes"


def test_comment_rendered_by_gitlab_tells_each_root_once_and_stays_inert() -> None:
    verdict = read_verdict(VERDICT_ROOTS)
    tree = parse_html(gitlab_html(render_markdown(verdict, links=LINKS)))
    assert_inert(tree)
    assert tree.headings == [
        "❌ gpuci: fail: 12 new isolation regressions · 1 failed test · 1 crashed test",
        f"🆕 order-dependent: {OOB} broke 5 later tests",
        "🆕 depends-on-others: 2 tests pass only after"
        " tests/gpu/test_compile.py::test_compile_softmax",
        f"🆕 order-dependent: {EVIL_A} and {EVIL_B} broke 1 later test",
        "🆕 concurrency: 1 test fails beside tests/gpu/test_hog_infer.py",
        "order-dependent: tests/gpu/test_pool.py::test_fill_and_release broke 1 later test (known)",
        "Failures",
    ]
    widths = {len(row) for row in tree.rows if len(row) != len(Category)}
    assert widths == {6, 7}, tree.rows  # the hostile ids split no table
    failures_at = next(i for i, row in enumerate(tree.rows) if row[:2] == ["category", "test"])
    counts_at = next(i for i, row in enumerate(tree.rows) if len(row) == len(Category))
    main = [row[1] for row in tree.rows[failures_at + 1 : counts_at]]
    assert main == [
        "tests/gpu/test_pool.py::test_reads_pool",
        "tests/gpu/test_pool.py::test_alone_poisoned",
        "tests/gpu/test_late.py::test_unsearched",
        OOB,
        "tests/gpu/test_stream.py::test_illegal_access",
    ]
    cells = {row[1]: row[-1] for row in tree.rows}
    # A diagnosed victim says what its bug is; it does not blame the test before it.
    assert cells["tests/gpu/test_pool.py::test_reads_pool"].startswith(UNINITIALIZED)
    assert "test_fill_and_release" not in cells["tests/gpu/test_pool.py::test_reads_pool"]
    assert cells["tests/gpu/test_late.py::test_unsearched"].startswith(
        "culprit: not searched (budget)"
    )
    assert cells[OOB].endswith("compute-sanitizer: Invalid __global__ write of size 4 bytes")
    # a victim is told under its root's heading, with its failure, as literal code
    (victim,) = [
        row for row in tree.rows if row[0] == "tests/gpu/test_evil.py::test_c[<b>|</details>]"
    ]
    assert victim[-1] == "RuntimeError: stream left non-default by <script>alert(1)</script>"
    shown = "\n".join(tree.code)
    for test in verdict.tests:
        if test.category not in (Category.PASSED, Category.SKIPPED):
            assert test.id in shown, test.id
    assert EVIL_A in shown and EVIL_B in shown


def test_comment_opens_with_each_root_its_victims_failures_and_commands_unfolded() -> None:
    markdown = render_markdown(read_verdict(VERDICT_ROOTS), links=LINKS)
    roots, _, rest = markdown.partition("#### Failures")
    first = roots.index(f"#### 🆕 order-dependent: `{OOB}` broke 5 later tests")
    assert roots.index("[Full HTML report](") < first  # the links come before the findings
    assert "<details>" not in roots  # nothing about a root is folded away
    oob = roots[first : roots.index("#### ", first + 1)]
    assert oob.count("| `tests/gpu/") == 5  # its victims, each with its failure
    assert oob.count("CUDA_ERROR_ILLEGAL_ADDRESS (sticky: the context is lost)") == 5
    assert "compute-sanitizer: `Invalid __global__ write of size 4 bytes`" in oob
    commands = oob[oob.index("```sh") :].splitlines()
    assert commands[1] == "# reproduce"
    assert commands[2].endswith(f"pytest {OOB} tests/gpu/test_oob.py::test_after_oob")
    # a victim is told under its root only, never again among the failures
    assert "test_after_oob" not in rest and "Victims of the roots" not in rest
    assert "test_reads_pool" in rest and "test_reads_pool" not in roots  # diagnosed: its own


def _many_roots(count: int) -> Verdict:
    verdict = read_verdict(VERDICT_ROOTS)
    (root,) = [r for r in verdict.roots if r.culprits == (OOB,)]
    return replace(verdict, roots=tuple(replace(root, culprits=(f"c{i}",)) for i in range(count)))


def test_comment_lists_at_most_twenty_roots() -> None:
    markdown = render_markdown(_many_roots(report.ROOT_LINES + 5), links=LINKS)
    assert markdown.count("\n#### 🆕 order-dependent: `c") == report.ROOT_LINES
    assert "…and 5 more roots: see the full report." in markdown
    assert markdown.count("\n# reproduce\n") == report.ROOT_LINES  # their commands
    html = render_html(_many_roots(report.ROOT_LINES + 5))
    assert html.count('<article class="card"') == report.ROOT_LINES + 5


def _big_verdict(counts: dict[Category, int], *, id_suffix: str = "") -> Verdict:
    tests = []
    for category, n in counts.items():
        for k in range(n):
            i = len(tests)
            file = f"tests/gpu/test_mod{i % 400:03d}.py"
            tests.append(
                TestVerdict(
                    id=f"{file}::test_{category.value}_{k}{id_suffix}",
                    file=file,
                    category=category,
                    outcomes={"isolated": "passed", "parallel": "failed", "suite": "passed"},
                    reruns=("passed", "passed"),
                    new=(k % 2 == 0) if category in ISOLATION_CATEGORIES else None,
                    message="" if category is Category.PASSED else f"AssertionError: #{k} @all",
                    reproduce=f"python -m pytest '{file}::test_{k}'",
                    log="a line of log\n" * 100
                    if category in (Category.CRASHED, Category.TIMED_OUT)
                    else "",
                )
            )
    return Verdict(
        verdict="fail",
        reasons=("many findings",),
        summary={c.value: n for c, n in counts.items()},
        modes={
            "parallel": {
                "wall_s": 100.0,
                "workers": 8,
                "file_runs": [
                    {
                        "file": f"tests/gpu/test_mod{j:03d}.py",
                        "status": "passed",
                        "slot": j % 8,
                        "gpu": str(j % 2),
                        "start": j * 0.2,
                        "end": j * 0.2 + 3,
                    }
                    for j in range(400)
                ],
            }
        },
        tests=tuple(tests),
    )


BIG = {
    Category.PASSED: 40_000,
    Category.SKIPPED: 2_000,
    Category.FAILED: 2_000,
    Category.FLAKY: 1_000,
    Category.ORDER_DEPENDENT: 1_500,
    Category.DEPENDS_ON_OTHERS: 500,
    Category.CONCURRENCY: 500,
    Category.CRASHED: 1_000,
    Category.TIMED_OUT: 500,
    Category.NOT_RUN: 1_000,
}


@pytest.mark.slow
def test_comment_of_50000_tests_is_capped_and_says_what_was_cut() -> None:
    verdict = _big_verdict(BIG)
    assert len(verdict.tests) == 50_000
    markdown = render_markdown(verdict, links=LINKS)
    assert len(markdown) <= MARKDOWN_MAX_CHARS < 1_000_000
    # Main table: 1,250 new regressions + failed + crashed + timed-out, 30 rows shown. The
    # findings of one category in one file (5 each here) are one row: "more" counts tests.
    main = 750 + 250 + 250 + 2_000 + 1_000 + 500
    data = markdown_data(
        verdict,
        LINKS,
        main_rows=report.MAIN_ROWS,
        detail_rows=report.DETAIL_ROWS,
        id_chars=report.MD_ID_CHARS,
    )
    rows = data["main"].rows
    shown = sum(len(r.members) or 1 for r in rows)
    assert len(rows) == report.MAIN_ROWS and shown > len(rows)
    assert f"…and {main - shown} more: see the full report." in markdown
    assert "<details><summary>Known isolation problems (1250)</summary>" in markdown
    for section, total in zip(data["details"], (1250, 1000, 1000), strict=True):
        told = sum(len(r.members) or 1 for r in section.rows)
        assert len(section.rows) == report.DETAIL_ROWS and section.total == total
        assert f"…and {total - told} more" in markdown  # known, flaky and not-run
    assert "| **2000** |" in markdown  # the counts are never cut


def test_comment_with_pathological_ids_still_fits() -> None:
    # Ids of 5,000 characters full of backticks make every cell as large as it can be.
    verdict = _big_verdict({Category.FAILED: 3_000, Category.FLAKY: 3_000}, id_suffix="`" * 5000)
    markdown = render_markdown(verdict, links=LINKS)
    assert len(markdown) <= MARKDOWN_MAX_CHARS
    assert "more: see the full report." in markdown


# --- the HTML report ------------------------------------------------------------------


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.raw: dict[str, list[str]] = {"script": [], "style": []}
        self.text: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in = tag if tag in self.raw else None

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in:
            self.raw[self._in].append(data)
        self.text.append(data)


def _page(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    return page


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@pytest.mark.parametrize("verdict", [VERDICT_ALL, VERDICT_ROOTS])
def test_html_loads_nothing_and_runs_only_its_own_hashed_script_and_style(verdict: Path) -> None:
    html = render_html(read_verdict(verdict))
    page = _page(html)
    tags = [t for t, _ in page.tags]
    assert tags.count("script") == 1 and tags.count("style") == 1
    assert not {"img", "link", "iframe", "object", "embed", "base", "form"} & set(tags)
    for tag, attrs in page.tags:
        assert not [a for a in attrs if a.startswith("on") or a in ("src", "style", "srcset")]
        if tag not in ("a", "svg"):  # an <a> is navigation, svg's xmlns is a name
            assert not [v for v in attrs.values() if v and "://" in v], (tag, attrs)
    csp = next(
        a["content"] for t, a in page.tags if a.get("http-equiv") == "Content-Security-Policy"
    )
    assert csp is not None
    (script,) = page.raw["script"]
    (style,) = page.raw["style"]
    assert csp == (
        f"default-src 'none'; style-src {_sha256(style)}; script-src {_sha256(script)};"
        " base-uri 'none'; form-action 'none'"
    )
    assert "url(" not in style and "@import" not in style and "://" not in script


def test_html_escapes_everything_untrusted() -> None:
    html = render_html(read_verdict(VERDICT_ALL))
    assert "<img" not in html and "onerror=alert(1)>" not in html
    assert "test_x[&lt;img src=x onerror=alert(1)&gt;]" in html
    assert "&lt;/pre&gt;&lt;script&gt;alert(&#39;log&#39;)&lt;/script&gt;" in html
    assert "\x1b" not in html  # ANSI colours are stripped from logs
    page = _page(html)
    text = "".join(page.text)
    assert "tests/gpu/test_cache.py::test_x[<img src=x onerror=alert(1)>]" in text
    assert "javascript:alert(1)" in text  # shown as text, not a link
    assert not [a for t, a in page.tags if t == "a" and "javascript" in (a.get("href") or "")]


def test_html_strips_control_characters_from_test_output() -> None:
    verdict = read_verdict(VERDICT_ALL)
    tests = tuple(replace(t, message=f"{HOSTILE[-2]} in {t.id}") for t in verdict.tests)
    html = render_html(replace(verdict, tests=tests))
    assert "\x1b" not in html and "\x00" not in html  # ESC and NUL bytes from test output
    assert "red and a  nul and a \t tab" in html


def test_html_shows_the_verdict_findings_and_evidence() -> None:
    verdict = read_verdict(VERDICT_ALL)
    html = render_html(verdict)
    text = "".join(_page(html).text)
    assert (
        text.index("FAIL")
        < text.index("3 new isolation regressions")
        < text.index("Isolation problems")
    )
    for section in ("Failures", "Crashes", "Timeouts", "Flaky tests", "Not run"):
        assert section in text
    assert "ended by signal 11 (SIGSEGV)" in text
    assert "Fatal Python error: Segmentation fault" in text
    regressions = text[text.index("Isolation problems") : text.index("Failures")]
    # New first, each with its badge.
    assert regressions.index("test_rows[fp16]") < regressions.index("test_concurrent_alloc")
    assert regressions.index("test_kernel_cache_race") < regressions.index("test_concurrent_alloc")
    assert regressions.count("new") >= 3 and regressions.count("known") >= 2
    # a thread-unsafe test is an isolation regression like the others, in their colour
    assert '<span class="cat c-thread-unsafe">thread-unsafe</span>' in html
    assert ".c-concurrency,.c-thread-unsafe{color:var(--iso)}" in html
    assert "--parallel-threads 4 tests/gpu/test_cache.py::test_kernel_cache_race" in text
    assert "python -m pytest -p no:cacheprovider 'tests/gpu/test_softmax.py::test_a'" in text
    for value in ("NVIDIA H100 80GB HBM3", "580.159.04", "13.0", "14.2.0", "3.12.3", "abc123def"):
        assert value in text
    assert 'href="https://gitlab.example.com/team/project/-/pipelines/42"' in html
    # Every test is in the report, passed and skipped ones compactly.
    for test in verdict.tests:
        assert test.id.split("::")[1] in text, test.id


def test_html_timeline_has_a_lane_per_slot_and_a_bar_per_file_run() -> None:
    html = render_html(read_verdict(VERDICT_ALL))
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert svg.count('<rect class="bar') == 5
    assert svg.count(">slot ") == 4 and ">GPU 0<" in svg and ">GPU 1<" in svg
    assert '<rect class="bar st-crashed"' in svg
    assert "<title>tests/gpu/test_stream.py — crashed, 0.40s → 12.0s (11.6s)</title>" in svg


def test_html_without_a_parallel_run() -> None:
    verdict = read_verdict(VERDICT_ALL)
    verdict = replace(verdict, modes={k: v for k, v in verdict.modes.items() if k != "parallel"})
    html = render_html(verdict)
    assert "<svg" not in html
    assert "No parallel run in this verdict" in html
    assert "Durations per file" in html


def test_html_tolerates_odd_modes() -> None:
    verdict = replace(
        read_verdict(VERDICT_ALL),
        modes={"parallel": {"file_runs": [{"file": "a.py"}, "junk", {"nofile": 1}]}, "x": "y"},
    )
    html = render_html(verdict)
    assert html.count('<rect class="bar st-unknown"') == 1


def test_html_crash_cause_comes_from_the_file_run_when_the_message_has_none() -> None:
    verdict = read_verdict(VERDICT_ALL)
    tests = tuple(
        replace(t, message="the interpreter died") if t.category is Category.CRASHED else t
        for t in verdict.tests
    )
    html = render_html(replace(verdict, tests=tests))
    assert "ended by signal 11 (SIGSEGV)" in html


@pytest.mark.slow
def test_html_of_50000_tests_is_fast_small_and_keeps_every_finding() -> None:
    verdict = _big_verdict(BIG)
    # this process's CPU time, not the wall: other processes on a busy machine do not count
    start = time.process_time()
    html = render_html(verdict)
    elapsed = time.process_time() - start
    assert elapsed < 15, elapsed  # about 0.5 s on a laptop: a quadratic step would be minutes
    assert len(html.encode()) < 20_000_000
    for test in verdict.tests:
        if test.category not in (Category.PASSED, Category.SKIPPED):
            assert f">{test.id}</code>" in html, test.id
    # one row per finding, but one per group of a category's findings in one file (5 here)
    rows = [r for s in html_data(verdict)["sections"] for r in s.rows]
    assert sum(len(r.members) or 1 for r in rows) == 50_000 - 42_000
    assert html.count("<tr data-cat=") == len(rows) < 50_000 - 42_000
    assert '<main class="lazy">' in html  # sections are laid out as they scroll into view
    assert "<main>" in render_html(read_verdict(VERDICT_ALL))


@pytest.mark.slow
def test_reports_of_many_roots_are_fast_and_capped() -> None:
    # 400 roots of 5 victims, each victim with a bisection of 6 runs of 8 shown ids.
    shown = tuple(f"tests/gpu/test_before.py::test_{i}" for i in range(8))
    probes = tuple(Probe(count=40, shown=shown, outcome=Outcome.FAILED) for _ in range(6))
    tests, roots = [], []
    for r in range(400):
        culprit = f"tests/gpu/test_c{r:03d}.py::test_culprit"
        victims = [
            TestVerdict(
                id=f"tests/gpu/test_v{r:03d}.py::test_{k}",
                file=f"tests/gpu/test_v{r:03d}.py",
                category=Category.ORDER_DEPENDENT,
                outcomes={"isolated": "passed", "suite": "failed"},
                new=True,
                message="AssertionError @all",
                reproduce=f"python -m pytest {culprit} tests/gpu/test_v{r:03d}.py::test_{k}",
                culprits=(culprit,),
                search="bisection: 6 run(s)",
                probes=probes,
            )
            for k in range(5)
        ]
        tests += victims
        roots.append(
            Root(
                culprits=(culprit,),
                category=Category.ORDER_DEPENDENT,
                victims=tuple(v.id for v in victims),
                reproduce=victims[0].reproduce,
            )
        )
    verdict = Verdict(
        verdict="fail",
        summary={"order-dependent": len(tests)},
        tests=tuple(tests),
        roots=tuple(roots),
    )
    start = time.process_time()  # CPU time: the load beside it does not count
    html = render_html(verdict)
    markdown = render_markdown(verdict, links=LINKS)
    elapsed = time.process_time() - start
    assert elapsed < 15, elapsed  # about 1 s on a laptop
    assert html.count('<article class="card"') == 400
    assert len(html.encode()) < 20_000_000
    assert len(markdown) <= MARKDOWN_MAX_CHARS
    assert markdown.count(" broke 5 later tests\n") == report.ROOT_LINES  # each root's heading
    assert markdown.count("| `tests/gpu/test_v") == 5 * report.ROOT_LINES  # with its victims
    assert "…and 380 more roots: see the full report." in markdown


# --- roots in the HTML report -------------------------------------------------------------


class _Anchored(HTMLParser):
    """The text of every element with an id, and every link with the id around it."""

    VOID = frozenset({"meta", "input", "br", "img", "hr", "link"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[tuple[str, str | None]] = []
        self.text: dict[str, str] = {}
        self.links: list[tuple[str, str | None]] = []  # (href, innermost id around it)
        self.pres: dict[str, list[str]] = {}  # <pre> blocks, by the id around them

    def _owner(self) -> str | None:
        return next((i for _, i in reversed(self.open) if i), None)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.text[str(found["id"])] = ""
        if tag == "a" and found.get("href"):
            self.links.append((str(found["href"]), self._owner()))
        if tag == "pre":
            self.pres.setdefault(self._owner() or "", []).append("")
        if tag not in self.VOID:
            self.open.append((tag, found.get("id")))

    def handle_endtag(self, tag: str) -> None:
        while self.open and self.open.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        for _, element in self.open:
            if element:
                self.text[element] += data
        if any(tag == "pre" for tag, _ in self.open):
            self.pres[self._owner() or ""][-1] += data


def _anchored(verdict: Verdict) -> _Anchored:
    page = _Anchored()
    page.feed(render_html(verdict))
    page.close()
    return page


def _row_of(verdict: Verdict, test_id: str) -> str:
    return f"t-{[t.id for t in verdict.tests].index(test_id)}"


def _squash(text: str) -> str:
    return " ".join(text.split())


def test_html_cards_tell_who_broke_whom_before_the_findings() -> None:
    verdict = read_verdict(VERDICT_ROOTS)
    page = _anchored(verdict)
    cards = [i for i in page.text if i.startswith("root-")]
    assert cards == ["root-1", "root-2", "root-3", "root-4", "root-5"]
    text = {i: _squash(page.text[i]) for i in cards}
    assert text["root-1"].startswith(f"{OOB} (failed) broke 5 later tests new order-dependent")
    assert text["root-2"].startswith(
        "2 tests pass only after tests/gpu/test_compile.py::test_compile_softmax new"
    )
    assert text["root-3"].startswith(f"{EVIL_A} and {EVIL_B} broke 1 later test new")
    assert text["root-4"].startswith("1 test fails beside tests/gpu/test_hog_infer.py new")
    assert "files beside it" in text["root-4"] and "tests before it" not in text["root-4"]
    assert text["root-5"].startswith(
        "tests/gpu/test_pool.py::test_fill_and_release broke 1 later test known"
    )
    # The victims, the minimal command with its copy button, the culprit's sanitizer block.
    for name in ("test_oob.py::test_after_oob", "test_reduce.py::test_max[fp16]"):
        assert f"tests/gpu/{name}" in text["root-1"]
    command = f"cd /builds/team/project && CUDA_VISIBLE_DEVICES=0 python -m pytest {OOB}"
    assert f"{command} tests/gpu/test_oob.py::test_after_oob" in text["root-1"]
    (block,) = page.pres["root-1"]
    assert block.splitlines()[:2] == [
        "Invalid __global__ write of size 4 bytes",
        "    at scatter_rows+0x70 in /builds/team/project/kernels/scatter.cu:8",
    ]
    # The evidence: each victim's search, and each run with what ran before it.
    assert "evidence: 10 run(s) of the culprit search" in text["root-1"]
    assert "tests/gpu/test_oob.py::test_after_oob — bisection: 6 run(s)" in text["root-1"]
    assert (
        "3 earlier, then tests/gpu/test_aaa.py::test_3, tests/gpu/test_aaa.py::test_4,"
        in text["root-1"]
    )
    assert (
        "tests/gpu/test_oob.py::test_sum — cascade: the culprit of an earlier victim"
        in (text["root-1"])
    )
    html = render_html(verdict)
    assert html.index(">Who broke whom <") < html.index(">Isolation problems <")
    # A copy button after each command: 5 cards, 6 rows (a victim's row has none).
    assert html.count('</code><button type="button" class="copy">copy</button>') == 5 + 6


def test_html_links_victims_to_their_card_and_back() -> None:
    verdict = read_verdict(VERDICT_ROOTS)
    page = _anchored(verdict)
    for href, _ in page.links:
        if href.startswith("#"):
            assert href[1:] in page.text, href  # every anchor link lands somewhere
    (root,) = [r for r in verdict.roots if r.culprits == (OOB,)]
    card = {href for href, owner in page.links if owner == "root-1"}
    assert f"#{_row_of(verdict, OOB)}" in card  # the culprit's own (failed) row
    for victim in root.victims:
        row = _row_of(verdict, victim)
        assert f"#{row}" in card
        assert ("#root-1", row) in page.links
        text = _squash(page.text[row])
        assert f"↑ root: {OOB} broke 5 later tests" in text
        assert "python -m pytest" not in text  # the card has the command, the row does not


def test_html_a_diagnosed_victim_says_its_bug_and_blames_nobody() -> None:
    verdict = read_verdict(VERDICT_ROOTS)
    page = _anchored(verdict)
    for name in ("test_reads_pool", "test_alone_poisoned"):
        row = _row_of(verdict, f"tests/gpu/test_pool.py::{name}")
        assert UNINITIALIZED in page.text[row]
        assert not [href for href, owner in page.links if owner == row]
        assert not [i for i, text in page.text.items() if i.startswith("root-") and name in text]
    assert not [i for i, text in page.text.items() if i.startswith("root-") and "early" in text]


def test_html_rows_show_search_notes_and_sanitizer_blocks() -> None:
    verdict = read_verdict(VERDICT_ROOTS)
    page = _anchored(verdict)
    row = _row_of(verdict, "tests/gpu/test_late.py::test_unsearched")
    assert "culprit: not searched (budget)" in page.text[row]
    (block,) = page.pres[_row_of(verdict, OOB)]
    assert block.startswith("Invalid __global__ write of size 4 bytes\n    at scatter_rows+0x70")
    crashed = _row_of(verdict, "tests/gpu/test_stream.py::test_illegal_access")
    block, log = page.pres[crashed]
    assert "thrust::system_error" in log
    assert block.endswith("is out of bounds `@all` | <img src=x onerror=alert(2)>")


def test_html_escapes_hostile_culprits_victims_and_sanitizer_output() -> None:
    html = render_html(read_verdict(VERDICT_ROOTS))
    assert "<img" not in html and "[<b>" not in html and "<script>alert" not in html
    assert "test_a[&lt;img src=x onerror=alert(1)&gt;]" in html
    assert "test_c[&lt;b&gt;|&lt;/details&gt;]" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert html.count("<details") == html.count("</details>")


def test_html_cards_data_counts_runs_and_what_ran_before() -> None:
    cards = html_data(read_verdict(VERDICT_ROOTS))["cards"]
    first = cards[0]
    assert (first.key, first.category, first.badge, first.runs) == (
        "root-1",
        "order-dependent",
        "new",
        10,
    )
    assert [n.category for n in first.named] == ["failed"]
    probes = first.victims[0].probes
    assert [(p.run, p.count, p.earlier, p.outcome) for p in probes] == [
        (1, 11, 3, "failed"),
        (2, 5, 0, "passed"),
        (3, 6, 0, "failed"),
        (4, 3, 0, "passed"),
        (5, 3, 0, "failed"),
        (6, 1, 0, "failed"),
    ]
    assert probes[0].shown[-1] == OOB
    # Culprits that are no finding of their own (passed, or a file) link nowhere.
    assert [(n.anchor, n.category) for n in cards[1].named] == [("", "")]
    assert [(n.anchor, n.category) for n in cards[3].named] == [("", "")]


# --- links and files --------------------------------------------------------------------


def test_links_from_env() -> None:
    env = {
        "CI_JOB_URL": "https://gitlab.example.com/g/p/-/jobs/7",
        "CI_PIPELINE_URL": "https://gitlab.example.com/g/p/-/pipelines/42",
    }
    links = links_from_env(env, "out dir/report.html")
    assert links == ReportLinks(
        report_url="https://gitlab.example.com/g/p/-/jobs/7/artifacts/file/out%20dir/report.html",
        pipeline_url="https://gitlab.example.com/g/p/-/pipelines/42",
        job_url="https://gitlab.example.com/g/p/-/jobs/7",
    )
    assert links_from_env({}, "report.html") == ReportLinks()
    assert links_from_env(env, "../x.html").report_url is None
    assert links_from_env(env, "./a/r.html").report_url == (
        "https://gitlab.example.com/g/p/-/jobs/7/artifacts/file/a/r.html"
    )
    bad = {"CI_JOB_URL": "javascript:alert(1)//", "CI_PIPELINE_URL": "ftp://x/y"}
    assert links_from_env(bad, "report.html") == ReportLinks()
    assert links_from_env({"CI_JOB_URL": "https://x/j)](y"}, "r.html") == ReportLinks()


def test_write_reports_beside_the_verdict(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_json_atomic(out / "verdict.json", verdict_to_json(read_verdict(VERDICT_ALL)))
    env = {"CI_JOB_URL": "https://gitlab.example.com/g/p/-/jobs/7", "CI_PROJECT_DIR": str(tmp_path)}
    html, markdown = write_reports(out / "verdict.json", html=None, markdown=None, environ=env)
    assert (html, markdown) == (out / "report.html", out / "comment.md")
    assert html.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    comment = markdown.read_text(encoding="utf-8")
    assert comment.startswith(MARKER + "\n")
    assert "(https://gitlab.example.com/g/p/-/jobs/7/artifacts/file/out/report.html)" in comment
    assert sorted(p.name for p in out.iterdir()) == ["comment.md", "report.html", "verdict.json"]


def test_write_reports_to_given_paths(tmp_path: Path) -> None:
    verdict = tmp_path / "verdict.json"
    write_json_atomic(verdict, json.loads(VERDICT_ALL.read_text(encoding="utf-8")))
    html, markdown = write_reports(
        verdict, html=tmp_path / "a" / "r.html", markdown=tmp_path / "b" / "c.md", environ={}
    )
    assert (html, markdown) == (tmp_path / "a" / "r.html", tmp_path / "b" / "c.md")
    assert html.is_file() and markdown.is_file()
    assert "`report.html` in the job's artifacts" in markdown.read_text(encoding="utf-8")


def test_write_reports_refuses_what_is_not_a_verdict(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        write_reports(tmp_path / "verdict.json", html=None, markdown=None, environ={})
    (tmp_path / "verdict.json").write_text('{"schema": "gpuci.run/1"}', encoding="utf-8")
    with pytest.raises(InputError, match="schema"):
        write_reports(tmp_path / "verdict.json", html=None, markdown=None, environ={})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["verdict.json"]


def test_a_failure_a_mode_copied_without_running_the_test_reads_not_rerun() -> None:
    test = TestVerdict(
        id="t/test_pool.py::test_victim",
        file="t/test_pool.py",
        category=Category.FAILED,
        outcomes={"isolated": "failed", "parallel": "failed", "suite": "failed"},
        reruns=("failed", "failed"),
        inferred=("isolated",),
        message="boom",
    )
    verdict = Verdict(verdict="fail", summary={"failed": 1}, tests=(test,))
    markdown = render_markdown(verdict, links=LINKS)
    (row,) = [line for line in markdown.splitlines() if "test_victim" in line]
    assert row.startswith("| failed | `t/test_pool.py::test_victim` | not re-run | failed |")
    assert "failed (inferred)" not in markdown and "failed (inferred)" not in render_html(verdict)


def test_a_root_lists_its_first_victims_and_counts_the_rest() -> None:
    culprit = "t/test_c.py::test_culprit"
    victims = tuple(
        TestVerdict(
            id=f"t/test_v.py::test_{k:02d}",
            file="t/test_v.py",
            category=Category.ORDER_DEPENDENT,
            outcomes={"suite": "failed"},
            reruns=("passed",),
            message="AssertionError",
            reproduce=f"python -m pytest {culprit} t/test_v.py::test_{k:02d}",
            culprits=(culprit,),
        )
        for k in range(ROOT_VICTIMS + 4)
    )
    root = Root(
        culprits=(culprit,),
        category=Category.ORDER_DEPENDENT,
        victims=tuple(v.id for v in victims),
        reproduce=victims[0].reproduce,
    )
    verdict = Verdict(
        verdict="fail", summary={"order-dependent": len(victims)}, tests=victims, roots=(root,)
    )
    markdown = render_markdown(verdict, links=LINKS)
    assert markdown.count("| `t/test_v.py::test_") == ROOT_VICTIMS
    assert "…and 4 more victims: see the full report." in markdown
    assert "#### Findings" not in markdown and "#### Failures" not in markdown  # none left
