"""Escaping: untrusted text (test ids, messages, logs) made safe for GitLab Markdown and HTML.

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
cannot print a string that did not pass one of the `md_*` filters (see `md_finalize`).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from markupsafe import Markup

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_LINE_BREAKS = re.compile(r"\r\n|[\r\n\u0085\u2028\u2029]")
_PLAIN_MD = re.compile("[A-Za-z0-9 ,;:()'=+\u00d7\u2013\u2014-]*")  # times sign, en and em dashes
_SAFE_URL = re.compile(r"https?://[^\s<>()\[\]{}\"'`\\|^]+", re.ASCII)


class Md(str):
    """Text already made safe for GitLab Markdown by one of the `md_*` filters."""

    __slots__ = ()


def md_code(text: object, *, table: bool = False, limit: int | None = None) -> str:
    """`text` as one inline code span that no Markdown, HTML or GitLab reference escapes."""
    flat = flatten(str(text))
    if limit is not None:
        flat = cut(flat, limit)
    if not flat.strip():
        return Md("` `" if flat else "")
    if table:
        flat = flat.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    # CommonMark strips one space at each end when both ends have one: pad only where a
    # backtick or a space at an end would otherwise be eaten or merge with the fence.
    if flat[0] in "` " or flat[-1] in "` ":
        flat = f" {flat} "
    return Md(f"{fence}{flat}{fence}")


def md_cell(text: object, limit: int | None = None) -> str:
    """`text` as a code span that is safe inside a GFM table cell."""
    return md_code(text, table=True, limit=limit)


def md_text(text: object, *, table: bool = False) -> str:
    """Our own plain words as they are; anything that Markdown or GitLab could read as syntax
    (links, references, mentions, emphasis, HTML) goes into a code span instead."""
    value = str(text)
    if _PLAIN_MD.fullmatch(value):
        return Md(value)
    return md_code(value, table=table)


def md_plain(text: object) -> str:
    """Our own words where even a code span would not be safe (inside raw HTML such as
    `<summary>`): refuse anything but letters, digits and plain punctuation."""
    value = str(text)
    if not _PLAIN_MD.fullmatch(value):
        raise ValueError(f"not plain text: {value[:40]!r}")
    return Md(value)


def md_url(url: object) -> str:
    """An http(s) URL for a Markdown link target, or nothing when it is not one."""
    return Md(safe_url(str(url)) or "")


def md_fence(lines: Iterable[object], info: str = "") -> str:
    """Lines of untrusted text as one fenced code block that no line inside can close."""
    flat = [flatten(str(line)) for line in lines]
    longest = max((len(r) for line in flat for r in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return Md("\n".join([fence + info, *flat, fence]))


def md_finalize(value: object) -> object:
    """Refuse to print into Markdown any string that no `md_*` filter has made safe."""
    if isinstance(value, Md | int | float | Markup) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        raise TypeError(f"comment template printed unescaped text {value[:40]!r}: use md_cell")
    raise TypeError(f"comment template printed a {type(value).__name__}")


def html_finalize(value: object) -> object:
    """Every value the report prints, test output included: ANSI colours and control
    characters (ESC, NUL, ...) gone, line breaks and tabs kept; markup gpuci built stays."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return _CONTROL_BUT_LINES.sub("", _ANSI.sub("", value))
    return value


def cut(text: str, limit: int) -> str:
    """`text`, cut to at most `limit` characters with an ellipsis."""
    return text if len(text) <= limit else text[: max(1, limit - 1)] + "…"


def flatten(text: str) -> str:
    """One line of text: no ANSI colours, line breaks as ⏎, other control characters as spaces."""
    text = _ANSI.sub("", text)
    text = _LINE_BREAKS.sub(" ⏎ ", text.replace("\t", " "))
    return _CONTROL.sub(" ", text)


def clean_log(text: str, limit: int) -> str:
    """A log's tail for a <pre>: ANSI colours gone, at most `limit` characters."""
    text = _CONTROL.sub("", _ANSI.sub("", text.replace("\r\n", "\n")).replace("\t", "    "))
    if len(text) > limit:
        cut = text[-limit:]
        text = "… (earlier lines cut)\n" + cut[cut.find("\n") + 1 :]
    return text


def safe_url(url: str | None) -> str | None:
    """`url` if it is a plain http(s) URL that cannot break out of Markdown or HTML, else None."""
    if not url or not _SAFE_URL.fullmatch(url):
        return None
    parts = urlsplit(url)
    return url if parts.scheme in ("http", "https") and parts.netloc else None


def csp_hash(source: str) -> str:
    """The CSP source expression that allows exactly this inline script or style."""
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"
