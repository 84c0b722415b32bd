"""Post the Markdown comment to the merge request as one gpuci note, updated in place.

gpuci's note is the newest note whose author is the token's user and whose body holds
`MARKER`; a note by anyone else is never touched, even if it quotes the marker. A dry
run reads (who the token is, which note it would update) and never writes, so running
it in a pipeline checks the token and the variables without changing the merge request.
The token is sent only in the ``PRIVATE-TOKEN`` header, only to the CI_API_V4_URL host
(redirects are not followed), and is masked in everything printed or raised.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from gpuci.gitlab.client import BACKOFF_S, TRIES, Client, MaybeWritten
from gpuci.gitlab.notes import MARKER, Notes, mask_token, read_target, token_of
from gpuci.model import GpuciError, InputError
from gpuci.run.disk.masking import known_secrets, mask_secrets

__all__ = ["MARKER", "NOTE_LIMIT", "TRIES", "publish_comment"]

NOTE_LIMIT = 1_000_000  # GitLab refuses a longer note body (characters)
REPORT_NAME = "report.html"  # the report beside the comment, which the note links


def read_comment(path: Path) -> str:
    """The note body: the comment file's text, with `MARKER` first if it lacks one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (write it with `gpuci report`)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not readable as UTF-8 text ({exc})") from None
    if not text.strip():
        raise InputError(f"{path}: the comment is empty, and GitLab refuses an empty note")
    if MARKER not in text:
        # without it, the next run could not find this note and would post a second one
        text = f"{MARKER}\n{text}"
    if len(text) > NOTE_LIMIT:
        raise InputError(
            f"{path}: {len(text):,} characters, over GitLab's {NOTE_LIMIT:,}-character"
            " note limit: the report stage must write a shorter comment"
        )
    return text


def publish_comment(
    comment: Path,
    *,
    dry_run: bool,
    environ: Mapping[str, str],
    out: TextIO = sys.stdout,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Create or update gpuci's note on this pipeline's merge request; the exit code."""
    secrets = known_secrets(environ)
    body = mask_secrets(read_comment(comment), secrets)
    _mask_report(comment.with_name(REPORT_NAME), secrets, out)
    target = read_target(environ)
    if isinstance(target, str):
        print(f"gpuci: {target}", file=out)
        return 0
    try:
        client = Client(target.api_url, token_of(target), out=out, sleep=sleep, secrets=secrets)
        _publish(Notes(target, client), body, dry_run=dry_run)
    except GpuciError as exc:
        # every message passes here once more, in case one embedded the token
        raise type(exc)(mask_token(str(exc), target.token)) from None
    return 0


def _mask_report(report: Path, secrets: list[str], out: TextIO) -> None:
    """The report the note links (beside the comment, an artifact) with its secrets masked."""
    try:
        text = report.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return  # not beside the comment: the note links none
    masked = mask_secrets(text, secrets)
    if masked != text:
        report.write_text(masked, encoding="utf-8")
        print(f"gpuci: masked a secret in {report}", file=out)


def _publish(gitlab: Notes, body: str, *, dry_run: bool) -> None:
    """Find gpuci's note and update it, or post one; in a dry run, say which."""
    target = gitlab.target
    size = f"{len(body):,} characters"
    where = f" ({target.mr_url})" if target.mr_url else ""
    for attempt in range(1, TRIES + 1):
        note_id, username = gitlab.find_note()
        if dry_run:
            action = f"update note {note_id}" if note_id else "post a new note"
            gitlab.say(
                f"dry run: would {action} as @{username} on {target.label} at"
                f" {target.api_url}{where}, {size}; nothing written"
            )
            return
        if note_id is not None:
            gitlab.update(note_id, body)
            gitlab.say(f"updated note {note_id} on {target.label}{where}, {size}")
            return
        try:
            note_id = gitlab.create(body)
        except MaybeWritten as exc:
            if attempt == TRIES:
                raise InputError(
                    f"GitLab kept failing on POST note ({exc}) after {TRIES} tries:"
                    f" check that {target.api_url} is up, then run the job again"
                ) from None
            # the note may exist although the answer was lost: look again before posting
            wait = BACKOFF_S * 2.0 ** (attempt - 1)
            gitlab.say(
                f"POST note: {exc}; looking for the note again in {wait:g} s"
                f" (try {attempt + 1} of {TRIES})"
            )
            gitlab.client.sleep(wait)
            continue
        gitlab.say(f"posted note {note_id} on {target.label}{where}, {size}")
        return
