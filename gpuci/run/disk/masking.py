"""Secrets: kept from every test interpreter, and masked in everything gpuci writes or posts.

gpuci's own token (`GPUCI_GITLAB_TOKEN`) and the variables the configuration names as
secret are withheld: removed from gpuci's environment before its first child starts, so
no test, discovery, evidence run or sanitizer run can print them. The values of every
secret gpuci knows (those, the other GitLab token variables, `CI_JOB_TOKEN` and the
variables that hold it or another credential of the job, which GitLab gives every job)
are masked in the files under OUT, the verdict, the report, the comment, the terminal
and the posted note.

Masking removes every run of `FRAGMENT_CHARS` or more consecutive characters of a
secret, not only whole values: pytest shortens a long string in an assertion to its two
ends (`'glcbt-64_x9...12-3456-cdEF'`), and each end is still most of a token. A public
prefix that only names the kind of token (`glpat-`) is not counted, or the prefix alone
would mask every mention of it. A value too short after its prefix to hold a fragment
is masked where it appears whole, as before.
"""

from __future__ import annotations

import contextlib
import functools
import html
import io
import json
import re
import shutil
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TextIO, cast

MASK = "[MASKED]"
# gpuci's own: no test needs them, so no test sees them
WITHHELD = ("GPUCI_GITLAB_TOKEN",)
# secrets gpuci knows of but leaves to the tests (GitLab's job token may fetch packages);
# the registry and dependency proxy passwords are the job token again, under other names
MASKED_TOO = (
    "GITLAB_TOKEN",
    "CI_JOB_TOKEN",
    "CI_REGISTRY_PASSWORD",
    "CI_DEPENDENCY_PROXY_PASSWORD",
    "CI_DEPLOY_PASSWORD",
    "CI_JOB_JWT",
    "CI_JOB_JWT_V1",
    "CI_JOB_JWT_V2",
)
# a value this short would mask ordinary words; no real token is
MIN_SECRET_CHARS = 6
# no run this long of a secret's characters may survive (DESIGN: "Secrets")
FRAGMENT_CHARS = 6
# GitLab's documented token prefixes: they name the kind of token, the rest is the secret
PUBLIC_PREFIXES = (
    "glpat-",  # personal, project and group access tokens
    "glcbt-",  # CI/CD job tokens
    "glptt-",  # pipeline trigger tokens
    "gldt-",  # deploy tokens
    "glrt-",  # runner authentication tokens
    "glrtr-",  # runner registration tokens
    "glft-",  # feed tokens
    "glimt-",  # incoming mail tokens
    "glagent-",  # cluster agent tokens
    "gloas-",  # OAuth application secrets
    "glsoat-",  # SCIM tokens
    "glffct-",  # feature flags client tokens
    "glwt-",  # workspace tokens
)


_Trie = dict[str, "_Trie"]  # the pieces by their next character; "" where one ends


def _json_char(char: str) -> str:
    return json.dumps(char)[1:-1]


# How one character of a secret may be spelled where gpuci's output holds it: as is,
# URL-quoted, repr-escaped (pytest's assertion messages), HTML-escaped (the report), as
# JSON escapes it (verdict.json, run.json, non-ASCII included). A fragment is spelled one
# character at a time, so a mask never cuts an escape in two.
SPELLINGS: tuple[Callable[[str], str], ...] = (
    lambda c: c,
    lambda c: urllib.parse.quote(c, safe=""),
    lambda c: repr(c)[1:-1],
    html.escape,
    _json_char,
)


def withhold_secrets(environ: MutableMapping[str, str], names: Iterable[str] = ()) -> list[str]:
    """Remove gpuci's own secrets and `names` from `environ`; the values removed."""
    values = []
    for name in dict.fromkeys((*WITHHELD, *names)):
        value = environ.pop(name, "").strip()
        if value:
            values.append(value)
    return values


def known_secrets(environ: Mapping[str, str], withheld: Iterable[str] = ()) -> list[str]:
    """Every secret value to mask: `withheld` ones and those still in `environ`."""
    values = [environ.get(name, "").strip() for name in (*WITHHELD, *MASKED_TOO)]
    found = [v for v in (*withheld, *values) if len(v) >= MIN_SECRET_CHARS]
    return sorted(set(found), key=len, reverse=True)


def secret_body(secret: str) -> str:
    """`secret` past its public prefix, if it has one."""
    for prefix in sorted(PUBLIC_PREFIXES, key=len, reverse=True):
        if secret.startswith(prefix):
            return secret[len(prefix) :]
    return secret


def secret_pieces(secret: str) -> set[str]:
    """What must not appear of `secret`: each run of `FRAGMENT_CHARS` characters past its
    prefix, or the whole value where that is shorter; each in every spelling."""
    body = secret_body(secret)
    if len(body) < FRAGMENT_CHARS:
        runs = [secret]
    else:  # the whole value too, so that it is masked prefix and all, as before
        runs = [
            secret,
            *(body[i : i + FRAGMENT_CHARS] for i in range(len(body) + 1 - FRAGMENT_CHARS)),
        ]
    return {"".join(spell(c) for c in run) for run in runs for spell in SPELLINGS}


def mask_secrets(text: str, secrets: Iterable[str]) -> str:
    """`text` with every fragment of each secret (`secret_pieces`) masked: pieces that
    overlap become one `MASK`, so no character between them survives."""
    pattern = _pattern(tuple(sorted({s for s in secrets if s})))
    if pattern is None:
        return text
    found = pattern.search(text)
    if found is None:  # the common case: nothing to copy
        return text
    pieces: list[str] = []
    done = 0
    while found is not None:
        start, end = found.span()
        probe = start + 1
        while probe < end:  # a piece starting inside this run may carry it further
            more = pattern.match(text, probe)
            if more is not None and more.end() > end:
                end = more.end()
            probe += 1
        pieces += (text[done:start], MASK)
        done = end
        found = pattern.search(text, end)
    pieces.append(text[done:])
    return "".join(pieces)


@functools.lru_cache(maxsize=16)
def _pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    """One regex for every piece of `secrets`. A trie of alternatives, not a flat list:
    the regex engine tries a flat list's branches one by one at each character, which
    costs about three times as long over a 10 MB log."""
    words = set().union(*(secret_pieces(s) for s in secrets)) if secrets else set()
    return re.compile(_trie_regex(words)) if words else None


def _trie_regex(words: Iterable[str]) -> str:
    trie: _Trie = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # a piece ends here
    return _node_regex(trie)


def _node_regex(node: _Trie) -> str:
    branches = [re.escape(c) + _node_regex(child) for c, child in sorted(node.items()) if c]
    if not branches:
        return ""
    ends_here = "" in node
    if len(branches) == 1 and not ends_here:
        return branches[0]
    # greedy: where a piece ends here and a longer one goes on, the longer one is tried first
    return "(?:" + "|".join(branches) + ")" + ("?" if ends_here else "")


def mask_files(root: Path, secrets: Iterable[str]) -> list[Path]:
    """Mask `secrets` in every file under `root` (the logs, JUnit files and journals the
    interpreters wrote hold the tests' output as it was); the files changed."""
    secrets = list(secrets)
    if not secrets or not root.is_dir():
        return []
    changed = []
    for path in sorted(root.rglob("*")):
        try:
            if not path.is_file() or path.is_symlink():
                continue
            # bytes that are not UTF-8 pass through unchanged, as surrogates
            text = path.read_bytes().decode("utf-8", "surrogateescape")
            masked = mask_secrets(text, secrets)
            if masked != text:
                _replace_text(path, masked)
                changed.append(path)
        except OSError:
            continue  # gone or unreadable: a lock file, a file another process removed
    return changed


def _replace_text(path: Path, text: str) -> None:
    """Write `text` beside `path`, with its mode, and rename it over: a reader never sees
    half a file."""
    temp = path.with_name(f".{path.name}.masking")
    try:
        temp.write_bytes(text.encode("utf-8", "surrogateescape"))
        shutil.copymode(path, temp)
        temp.replace(path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


class MaskedStream(io.TextIOBase):
    """A text stream that masks `secrets` in each write: gpuci's terminal output, where a
    test id or a failure's first line may carry a test's secret."""

    def __init__(self, stream: TextIO, secrets: Iterable[str]) -> None:
        super().__init__()
        self.stream = stream
        self.secrets = tuple(secrets)

    def write(self, text: str) -> int:
        """Write `text` masked; the length given, as a caller expects."""
        self.stream.write(mask_secrets(text, self.secrets))
        return len(text)

    def flush(self) -> None:
        """Flush the stream underneath."""
        self.stream.flush()

    def isatty(self) -> bool:
        """Whether the stream underneath is a terminal (progress lines redraw there)."""
        return self.stream.isatty()

    def fileno(self) -> int:
        """The stream underneath's descriptor."""
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """The stream underneath's encoding."""
        return self.stream.encoding


@contextlib.contextmanager
def masked_terminal(secrets: Sequence[str]) -> Iterator[None]:
    """gpuci's standard output and error with `secrets` masked while the block runs."""
    if not secrets:
        yield
        return
    saved = sys.stdout, sys.stderr
    sys.stdout = cast(TextIO, MaskedStream(sys.stdout, secrets))
    sys.stderr = cast(TextIO, MaskedStream(sys.stderr, secrets))
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = saved
