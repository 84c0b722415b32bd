"""The GitLab API for one merge request's notes: who the token is, paging, retries, masking.

The token is sent only in the ``PRIVATE-TOKEN`` header, only to the CI_API_V4_URL host
(redirects are not followed), and is masked in everything printed or raised.
"""

from __future__ import annotations

import contextlib
import email.utils
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

import requests
import urllib3.exceptions

from gpuci.model import InputError
from gpuci.run.disk.masking import mask_secrets

MARKER = "<!-- gpuci-report -->"
MR_VARIABLES = ("CI_API_V4_URL", "CI_PROJECT_ID", "CI_MERGE_REQUEST_IID")
TOKEN_VARIABLES = ("GPUCI_GITLAB_TOKEN", "GITLAB_TOKEN")
TIMEOUT = (5.0, 30.0)  # (connect, read) seconds, for every try of every request
TRIES = 4  # per request, the first included
BACKOFF_S = 1.0  # the wait after the first 5xx or lost connection; doubles each try
MAX_WAIT_S = 60.0  # the longest one wait may be, whatever Retry-After asks for
PER_PAGE = 100  # GitLab's largest page
MAX_PAGES = 1000  # 100,000 notes: more means the server's next-page links loop


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """The merge request to comment on, and the token to do it with."""

    api_url: str  # CI_API_V4_URL, without a trailing slash
    project_id: str
    mr_iid: str
    token: str = field(repr=False)
    token_variable: str  # the variable the token came from, for error messages
    mr_url: str = ""  # the merge request's web page, when CI says where it is

    @property
    def notes_url(self) -> str:
        """The merge request's notes endpoint."""
        project = urllib.parse.quote(self.project_id, safe="")
        iid = urllib.parse.quote(self.mr_iid, safe="")
        return f"{self.api_url}/projects/{project}/merge_requests/{iid}/notes"

    @property
    def label(self) -> str:
        """How messages name the merge request."""
        return f"MR !{self.mr_iid} of project {self.project_id}"


class MaybeWritten(Exception):
    """A POST failed in a way that leaves open whether GitLab created the note."""


def mask_token(text: str, token: str) -> str:
    """`text` with every spelling of `token` (plain, URL-quoted, repr-escaped) masked."""
    return mask_secrets(text, [token])


def read_target(environ: Mapping[str, str]) -> Target | str:
    """The merge request of this pipeline, or why this is not a merge-request pipeline."""
    missing = [name for name in MR_VARIABLES if not environ.get(name, "").strip()]
    if missing:
        return f"not in a merge request pipeline ({', '.join(missing)} unset): nothing to publish"
    for name in TOKEN_VARIABLES:
        token = environ.get(name, "").strip()  # a pasted token often brings a newline
        if token:
            break
    else:
        if environ.get("CI_JOB_TOKEN", "").strip():
            raise InputError(
                "only CI_JOB_TOKEN is set, and GitLab does not let a job token post merge"
                " request notes: set GPUCI_GITLAB_TOKEN (a masked CI/CD variable) to a"
                " project access token with api scope"
            )
        raise InputError(
            "no GitLab token: set GPUCI_GITLAB_TOKEN (a masked CI/CD variable) to a"
            " project access token with api scope"
        )
    if any(not char.isprintable() or char.isspace() for char in token):
        raise InputError(
            f"{name} holds spaces or control characters inside the token: set it again"
        )
    api_url = environ["CI_API_V4_URL"].strip().rstrip("/")
    if urllib.parse.urlsplit(api_url).scheme not in {"http", "https"}:
        raise InputError(
            f"CI_API_V4_URL is {mask_token(api_url, token)!r}: expected an http(s) URL"
        )
    project_url = environ.get("CI_MERGE_REQUEST_PROJECT_URL", "").strip().rstrip("/")
    iid = environ["CI_MERGE_REQUEST_IID"].strip()
    return Target(
        api_url=api_url,
        project_id=environ["CI_PROJECT_ID"].strip(),
        mr_iid=iid,
        token=token,
        token_variable=name,
        mr_url=f"{project_url}/-/merge_requests/{iid}" if project_url else "",
    )


def retry_wait(response: requests.Response, attempt: int, now: float) -> float:
    """Seconds to wait before retrying after `response` (a 429 or 5xx) on try `attempt`."""
    wait = backoff(attempt)
    if response.status_code == 429:
        retry_after = response.headers.get("Retry-After", "").strip()
        reset = response.headers.get("RateLimit-Reset", "").strip()
        if retry_after.isdigit():
            wait = float(retry_after)
        elif retry_after:  # Retry-After may also be an HTTP date
            with contextlib.suppress(TypeError, ValueError):
                wait = email.utils.parsedate_to_datetime(retry_after).timestamp() - now
        elif reset.isdigit():  # an epoch time, in seconds
            wait = float(reset) - now
    return min(max(wait, 0.0), MAX_WAIT_S)


def backoff(attempt: int) -> float:
    """Seconds to wait after try `attempt` failed for want of a server or a connection."""
    return min(BACKOFF_S * 2.0 ** (attempt - 1), MAX_WAIT_S)


class GitLab:
    """A GitLab API client for one merge request's notes: retries, errors, masking."""

    def __init__(
        self,
        target: Target,
        session: requests.Session,
        *,
        sleep: Callable[[float], None],
        out: TextIO,
    ) -> None:
        self.target = target
        self.session = session
        self.sleep = sleep
        self.out = out

    def say(self, line: str) -> None:
        """Print one line, token masked."""
        print(mask_token(f"gpuci: {line}", self.target.token), file=self.out, flush=True)

    def request(
        self,
        method: str,
        url: str,
        *,
        what: str,
        params: dict[str, str] | None = None,
        body: str | None = None,
        idempotent: bool = True,
    ) -> requests.Response:
        """Send one request, retrying 429, 5xx and lost connections; refuse other errors."""
        for attempt in range(1, TRIES + 1):
            try:
                response = self.session.request(
                    method,
                    url,
                    params=params,
                    json=None if body is None else {"body": body},
                    timeout=TIMEOUT,
                    allow_redirects=False,  # requests would carry PRIVATE-TOKEN to any host
                )
            except (
                requests.ConnectionError,
                requests.Timeout,
                requests.exceptions.ChunkedEncodingError,
            ) as exc:
                problem = f"{type(exc).__name__}: {exc}"
                wait = backoff(attempt)
                # only a connection never made proves that GitLab got nothing
                reason = getattr(exc.args[0], "reason", None) if exc.args else None
                unsent = isinstance(exc, requests.ConnectTimeout) or isinstance(
                    reason, urllib3.exceptions.NewConnectionError
                )
                if not idempotent and not unsent:
                    raise MaybeWritten(problem) from None
            except requests.RequestException as exc:
                raise InputError(f"{what} failed: {type(exc).__name__}: {exc}") from None
            else:
                status = response.status_code
                if status != 429 and status < 500:
                    self.check(response, what=what)
                    return response
                problem = f"{status} {response.reason}"
                wait = retry_wait(response, attempt, time.time())
                if not idempotent and status != 429:  # a 429 is refused before any work
                    raise MaybeWritten(problem)
            if attempt == TRIES:
                raise InputError(
                    f"GitLab kept failing on {what} ({problem}) after {TRIES} tries:"
                    f" check that {self.target.api_url} is up, then run the job again"
                )
            self.say(f"{what}: {problem}; retrying in {wait:g} s (try {attempt + 1} of {TRIES})")
            self.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def check(self, response: requests.Response, *, what: str) -> None:
        """Raise an InputError naming what to fix unless `response` succeeded."""
        status = response.status_code
        target = self.target
        if 200 <= status < 300:
            return
        if 300 <= status < 400:
            location = response.headers.get("Location", "?")
            raise InputError(
                f"GitLab redirected {what} ({status}) to {location}: set CI_API_V4_URL to"
                " the final address (gpuci follows no redirect, so the token goes nowhere else)"
            )
        if status == 401:
            raise InputError(
                f"GitLab refused the token (401): set {target.token_variable} to a token"
                " with api scope that has not expired"
            )
        if status == 403:
            raise InputError(
                f"GitLab forbade {what} (403): the token in {target.token_variable} needs"
                f" api scope and the right to comment on {target.label}"
            )
        if status == 404 and what == "GET /user":
            raise InputError(
                f"no GitLab API at {target.api_url} (404 on /user): check CI_API_V4_URL"
            )
        if status == 404:
            raise InputError(
                f"project {target.project_id} or MR !{target.mr_iid} not found at"
                f" {target.api_url}: check CI_PROJECT_ID / CI_MERGE_REQUEST_IID, or the"
                " token cannot see the project"
            )
        raise InputError(
            f"GitLab answered {what} with {status} {response.reason}: {gitlab_message(response)}"
        )

    def json(self, response: requests.Response, *, what: str) -> Any:
        """The JSON body of a successful response."""
        try:
            return response.json()
        except ValueError:
            raise InputError(
                f"GitLab answered {what} with something other than JSON:"
                f" is CI_API_V4_URL ({self.target.api_url}) GitLab's API?"
            ) from None

    def user(self) -> tuple[int, str]:
        """The token's user: id and username."""
        user = self.json(
            self.request("GET", f"{self.target.api_url}/user", what="GET /user"), what="GET /user"
        )
        if not isinstance(user, dict) or not isinstance(user.get("id"), int):
            raise InputError("GitLab's answer to GET /user has no user id: check CI_API_V4_URL")
        return user["id"], str(user.get("username", user["id"]))

    def own_notes(self, user_id: int) -> list[dict[str, Any]]:
        """Every note on the merge request that gpuci posted as `user_id`, all pages."""
        target = self.target
        what = f"GET notes of {target.label}"
        origin = urllib.parse.urlsplit(target.api_url)[:2]
        url = target.notes_url
        params: dict[str, str] | None = {"per_page": str(PER_PAGE)}
        ours: list[dict[str, Any]] = []
        for _ in range(MAX_PAGES):
            response = self.request("GET", url, what=what, params=params)
            notes = self.json(response, what=what)
            if not isinstance(notes, list):
                raise InputError(f"GitLab answered {what} with no list of notes")
            ours += [note for note in notes if is_own_note(note, user_id)]
            next_page = response.headers.get("X-Next-Page", "").strip()
            next_link = response.links.get("next", {}).get("url", "")
            if next_page:
                url, params = target.notes_url, {"per_page": str(PER_PAGE), "page": next_page}
            elif next_link:
                # GitLab leaves X-Next-Page out of some large lists; the Link header remains
                if urllib.parse.urlsplit(next_link)[:2] != origin:
                    raise InputError(
                        f"GitLab's next-page link points to {next_link}, not to"
                        f" {target.api_url}: refusing to send the token there;"
                        " check CI_API_V4_URL and GitLab's external_url"
                    )
                url, params = next_link, None
            else:
                return ours
        raise InputError(f"{what}: more than {MAX_PAGES} pages; GitLab's pagination loops")

    def find_note(self) -> tuple[int | None, str]:
        """The id of gpuci's note to update (None: post a new one), and the user's name."""
        user_id, username = self.user()
        ours = self.own_notes(user_id)
        if not ours:
            return None, username
        newest = max(int(note["id"]) for note in ours)  # note ids grow with time
        if len(ours) > 1:
            self.say(
                f"{len(ours)} gpuci notes by @{username} on {self.target.label};"
                f" updating the newest, note {newest}"
            )
        return newest, username

    def update(self, note_id: int, body: str) -> None:
        """Replace the body of note `note_id`."""
        self.request(
            "PUT",
            f"{self.target.notes_url}/{note_id}",
            what=f"PUT note {note_id}",
            body=body,
        )

    def create(self, body: str) -> int:
        """Post a new note; its id. Raises MaybeWritten when the outcome is unknown."""
        what = f"POST note on {self.target.label}"
        response = self.request(
            "POST", self.target.notes_url, what=what, body=body, idempotent=False
        )
        note = self.json(response, what=what)
        return int(note["id"]) if isinstance(note, dict) and "id" in note else 0


def is_own_note(note: Any, user_id: int) -> bool:
    """Whether `note` is gpuci's: by the token's user, not a system note, holding MARKER."""
    if not isinstance(note, dict) or note.get("system") or "id" not in note:
        return False
    author = note.get("author")
    body = note.get("body")
    return (
        isinstance(author, dict)
        and author.get("id") == user_id
        and isinstance(body, str)
        and MARKER in body
    )


def gitlab_message(response: requests.Response) -> str:
    """GitLab's own explanation in an error response, shortened to one line."""
    try:
        data = response.json()
        message = data.get("message") or data.get("error") or data
    except (ValueError, AttributeError):
        message = response.text
    text = " ".join(str(message).split())
    return text[:300] + ("…" if len(text) > 300 else "")
