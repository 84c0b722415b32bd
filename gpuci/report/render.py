"""Report: render `verdict.json` as a self-contained HTML report and a merge-request comment.

Both outputs show untrusted text: test ids, messages and logs come from the code under
test. The HTML relies on Jinja2's autoescaping plus a Content-Security-Policy that lets
only the report's own inline script and style run (by their SHA-256 hashes: the file is
static, so a nonce would add nothing a hash does not, and a hash keeps the output
deterministic). Nothing is loaded from the network: `default-src 'none'`. The Markdown's
escaping is `gpuci.report.escape`'s; the data the templates show is
`gpuci.report.report_data`'s (HTML) and `gpuci.report.comment_data`'s (Markdown).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

import jinja2

from gpuci.formats import read_verdict
from gpuci.model import Verdict
from gpuci.report.comment_data import (
    DETAIL_ROWS,
    MAIN_ROWS,
    MARKER,
    MD_ID_CHARS,
    ROOT_LINES,
    ReportLinks,
    markdown_data,
)
from gpuci.report.escape import (
    csp_hash,
    html_finalize,
    md_cell,
    md_code,
    md_fence,
    md_finalize,
    md_plain,
    md_text,
    md_url,
    safe_url,
)
from gpuci.report.report_data import html_data
from gpuci.run.disk.masking import known_secrets, mask_secrets

__all__ = [
    "DETAIL_ROWS",
    "MAIN_ROWS",
    "MARKER",
    "ROOT_LINES",
    "ReportLinks",
    "md_cell",
    "md_code",
    "md_fence",
    "md_text",
    "render_html",
]

HTML_TEMPLATE = "report.html.j2"
MARKDOWN_TEMPLATE = "comment.md.j2"
# GitLab refuses notes over 1,000,000 characters; stay far below so that a comment
# never fails to post and never makes the merge-request page slow to load.
MARKDOWN_MAX_CHARS = 400_000
# beside this module: in a source checkout and in the installed wheel alike
_TEMPLATE_DIRS = (Path(__file__).parent / "templates",)


def links_from_env(environ: Mapping[str, str], html_path: str) -> ReportLinks:
    """The comment's links from GitLab CI's variables; anything but an http(s) URL is dropped."""
    job_url = safe_url(environ.get("CI_JOB_URL"))
    report_url = None
    path = html_path.replace(os.sep, "/").lstrip("/")
    while path.startswith("./"):
        path = path[2:]
    if job_url and path and ".." not in path.split("/"):
        report_url = safe_url(f"{job_url.rstrip('/')}/artifacts/file/{quote(path, safe='/')}")
    return ReportLinks(
        report_url=report_url,
        pipeline_url=safe_url(environ.get("CI_PIPELINE_URL")),
        job_url=job_url,
    )


def render_html(verdict: Verdict) -> str:
    """The self-contained HTML report of a verdict."""
    return _environment(html=True).get_template(HTML_TEMPLATE).render(html_data(verdict))


def render_markdown(verdict: Verdict, *, links: ReportLinks) -> str:
    """The merge-request comment of a verdict, cut to fit well inside GitLab's note limit."""
    template = _environment(html=False).get_template(MARKDOWN_TEMPLATE)
    main_rows, detail_rows, id_chars = MAIN_ROWS, DETAIL_ROWS, MD_ID_CHARS
    while True:
        text = template.render(
            markdown_data(
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
    secrets: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Render both reports of `verdict_path` (default: beside it) and write them atomically,
    every secret gpuci knows (`secrets` and those in `environ`) masked."""
    verdict = read_verdict(verdict_path)
    html = html if html is not None else verdict_path.parent / "report.html"
    markdown = markdown if markdown is not None else verdict_path.parent / "comment.md"
    links = links_from_env(environ, _artifact_path(html, environ))
    masked = known_secrets(environ, secrets)
    _write_text_atomic(html, mask_secrets(render_html(verdict), masked))
    _write_text_atomic(markdown, mask_secrets(render_markdown(verdict, links=links), masked))
    return html, markdown


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
    finalize: Callable[[object], object] = html_finalize if html else md_finalize
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(dirs),
        # The comment is Markdown, not HTML: the md_* filters escape it, and md_finalize
        # makes sure that nothing reaches it without them.
        autoescape=html,  # noqa: S701
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=finalize,
        bytecode_cache=_bytecode_cache(html=html),
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


class _QuietBytecodeCache(jinja2.FileSystemBytecodeCache):
    """Jinja2's cache of compiled templates, where a cache it cannot write (a full disk)
    costs a compile, never the report."""

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def _bytecode_cache(*, html: bool) -> jinja2.BytecodeCache | None:
    """The compiled templates kept from one gpuci to the next, in Jinja2's own folder for
    this user (private, refused where another user owns it): compiling both templates is
    a good part of a small check's own CPU. Jinja2 keys a compiled template by its name
    and its source, not by the environment that compiled it; this module's settings
    (autoescape, finalize) are compiled in, so the files' names also carry a digest of
    this module, of Jinja2's and Python's versions, and which environment. None where no
    private folder can be had: each gpuci compiles them, as without a cache."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(f"{jinja2.__version__} {sys.version} html={html}".encode())
    try:
        return _QuietBytecodeCache(pattern=f"gpuci-{digest.hexdigest()[:20]}-%s.cache")
    except (OSError, RuntimeError):  # RuntimeError: Jinja2 found no safe folder
        return None


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
