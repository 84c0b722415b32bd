"""Secrets: kept from every test interpreter, and masked in everything gpuci writes or posts.

gpuci's own token (`GPUCI_GITLAB_TOKEN`) and the variables the configuration names as
secret are withheld: removed from gpuci's environment before its first child starts, so
no test, discovery, evidence run or sanitizer run can print them. The values of every
secret gpuci knows (those, the other GitLab token variables, `CI_JOB_TOKEN`, which GitLab
gives every job) are masked in the report, the comment and the posted note.
"""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Iterable, Mapping, MutableMapping

MASK = "[MASKED]"
# gpuci's own: no test needs them, so no test sees them
WITHHELD = ("GPUCI_GITLAB_TOKEN",)
# secrets gpuci knows of but leaves to the tests (GitLab's job token may fetch packages)
MASKED_TOO = ("GITLAB_TOKEN", "CI_JOB_TOKEN")
# a value this short would mask ordinary words; no real token is
MIN_SECRET_CHARS = 6


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
    return sorted(set(found), key=len, reverse=True)  # a longer secret may hold a shorter one


def mask_secrets(text: str, secrets: Iterable[str]) -> str:
    """`text` with every spelling of each secret (plain, URL-quoted, repr- and HTML-escaped)
    masked."""
    for secret in secrets:
        if not secret:
            continue
        spellings = {
            secret,
            urllib.parse.quote(secret, safe=""),
            repr(secret)[1:-1],
            html.escape(secret),
        }
        for spelling in sorted(spellings, key=len, reverse=True):
            text = text.replace(spelling, MASK)
    return text
