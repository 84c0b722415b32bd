"""One GitLab API client for everything gpuci asks GitLab: the notes and the baseline.

Retries, backoff, ``Retry-After`` and which methods may be retried are urllib3's `Retry`,
mounted on a requests `Session`; paging follows GitLab's ``X-Next-Page`` header, else the
``Link: rel="next"`` one (requests' `Response.links`). What is ours: the token sent in
one header, only to the API's host (no redirect is followed with it), masked in every
line printed or raised, and errors that say what to fix.
"""

from __future__ import annotations

import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import requests
import urllib3.exceptions
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from gpuci import __version__
from gpuci.model import InputError
from gpuci.run.disk.masking import mask_secrets

TIMEOUT = (5.0, 30.0)  # (connect, read) seconds, for every try of every request
TRIES = 4  # per request, the first included
BACKOFF_S = 1.0  # urllib3's backoff_factor: waits 0, 2, 4 s after consecutive failures
MAX_WAIT_S = 60.0  # the longest one wait may be, whatever Retry-After asks for
RETRIED_STATUSES = (429, 500, 502, 503, 504)
# POST is not retried on an answer or a lost answer: the note may exist (MaybeWritten)
RETRIED_METHODS = frozenset({"GET", "HEAD", "PUT"})
PER_PAGE = 100  # GitLab's largest page
MAX_PAGES = 1000  # more means the server's next-page links loop


@dataclass(frozen=True, slots=True, kw_only=True)
class Token:
    """A token, the header GitLab reads it from, and the variable it came from."""

    header: str  # PRIVATE-TOKEN or JOB-TOKEN
    value: str = field(repr=False)
    variable: str  # for error messages: what to set


class MaybeWritten(Exception):
    """A POST failed in a way that leaves open whether GitLab created the note."""


class SaidRetry(Retry):
    """urllib3's Retry, whose waits are capped, said, and slept by a sleep we choose."""

    say: Callable[[str], None] = staticmethod(lambda line: None)
    pause: Callable[[float], None] = staticmethod(time.sleep)
    what: str = "the request"

    def new(self, **kw: Any) -> SaidRetry:
        """The next try's Retry (urllib3 makes one per failure), still saying and sleeping."""
        retry = super().new(**kw)
        retry.say, retry.pause, retry.what = self.say, self.pause, self.what
        return retry

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        """urllib3's rule, and a 429 for any method: GitLab refuses it before any work."""
        if status_code == 429 and self.total:
            return True
        return super().is_retry(method, status_code, has_retry_after)

    def sleep(self, response: Any = None) -> None:
        """Wait as urllib3 would (Retry-After, else exponential backoff), at most MAX_WAIT_S."""
        asked = self.get_retry_after(response) if response is not None else None
        wait = min(asked if asked is not None else self.get_backoff_time(), MAX_WAIT_S)
        last = self.history[-1] if self.history else None
        if last is not None and last.status:
            problem = f"HTTP {last.status}"
        else:
            error = last.error if last is not None else None
            problem = f"{type(error).__name__}: {error}" if error else "failed"
        tried = len(self.history)
        self.say(f"{self.what}: {problem}; retrying in {wait:g} s (try {tried + 1} of {TRIES})")
        self.pause(wait)


def session_for(
    token: Token | None, *, what: str, say: Callable[[str], None], sleep: Callable[[float], None]
) -> requests.Session:
    """A requests Session that retries as `RETRIED_STATUSES` and connections need, sending
    `token` (None: no token, for object storage) with every request."""
    retry = SaidRetry(
        total=TRIES - 1,
        backoff_factor=BACKOFF_S,
        backoff_max=MAX_WAIT_S,
        status_forcelist=RETRIED_STATUSES,
        allowed_methods=RETRIED_METHODS,
        respect_retry_after_header=True,
        raise_on_status=False,  # the last answer comes back: its error names what failed
    )
    retry.say, retry.pause, retry.what = say, sleep, what
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["User-Agent"] = f"gpuci/{__version__}"
    if token is not None:
        session.headers[token.header] = token.value
    return session


class Refused(InputError):
    """GitLab answered with an error status (kept: a caller may try another token)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Client:
    """GitLab's API at `api_url` with one token: requests, errors, paging, masking."""

    def __init__(
        self,
        api_url: str,
        token: Token,
        *,
        out: TextIO = sys.stdout,
        sleep: Callable[[float], None] = time.sleep,
        secrets: Sequence[str] = (),
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.out = out
        self.sleep = sleep
        self.secrets = [token.value, *secrets]  # every token this job holds is masked

    def mask(self, text: str) -> str:
        """`text` with every token this client knows masked."""
        return mask_secrets(text, self.secrets)

    def say(self, line: str) -> None:
        """Print one line, tokens masked."""
        print(self.mask(f"gpuci: {line}"), file=self.out, flush=True)

    def request(
        self,
        method: str,
        url: str,
        *,
        what: str,
        params: Mapping[str, str] | None = None,
        body: str | None = None,
        hints: Mapping[int, str] | None = None,
        token: bool = True,
        redirect_ok: bool = False,
    ) -> requests.Response:
        """Send one request (retried by urllib3 where safe); its answer when it succeeded,
        else an InputError (Refused: GitLab's error status) that names what to fix.
        `hints`: what a status means here. Without `token`, none is sent and redirects are
        followed (object storage); with `redirect_ok`, a redirect is answered, not refused."""
        with session_for(
            self.token if token else None, what=what, say=self.say, sleep=self.sleep
        ) as session:
            try:
                response = session.request(
                    method,
                    url,
                    params=params,
                    json=None if body is None else {"body": body},
                    timeout=TIMEOUT,
                    # requests would carry the token header to any host a redirect names
                    allow_redirects=not token,
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                problem = self.mask(f"{type(exc).__name__}: {exc}")
                if method == "POST" and not _unsent(exc):
                    raise MaybeWritten(problem) from None
                raise InputError(
                    f"{what} failed after {TRIES} tries ({problem}): check that"
                    f" {self.mask(self.api_url)} is up and reachable, then run the job again"
                ) from None
            except requests.RequestException as exc:
                raise InputError(self.mask(f"{what} failed: {type(exc).__name__}: {exc}")) from None
        status = response.status_code
        if method == "POST" and (status in RETRIED_STATUSES):
            raise MaybeWritten(f"{status} {response.reason}")
        if status in RETRIED_STATUSES:
            raise InputError(
                f"GitLab kept failing on {what} ({status} {response.reason}) after {TRIES}"
                f" tries: check that {self.mask(self.api_url)} is up, then run the job again"
            )
        if not (200 <= status < 300 or (redirect_ok and 300 <= status < 400)):
            raise Refused(self.mask(self._refusal(response, what, hints or {})), status)
        return response

    def _refusal(self, response: requests.Response, what: str, hints: Mapping[int, str]) -> str:
        status = response.status_code
        variable = self.token.variable
        if 300 <= status < 400:
            location = response.headers.get("Location", "?")
            return (
                f"GitLab redirected {what} ({status}) to {location}: set CI_API_V4_URL to"
                " the final address (gpuci follows no redirect, so the token goes nowhere else)"
            )
        if status in hints:
            return hints[status]
        if status == 401:
            return (
                f"GitLab refused the token in {variable} (401) on {what}: set {variable} to a"
                " token that has not expired, with api scope"
            )
        if status == 403:
            return f"GitLab forbade {what} (403) to the token in {variable}: it needs api scope"
        if status == 404:
            return f"GitLab found nothing at {what} (404) at {self.api_url}: check CI_API_V4_URL"
        return f"GitLab answered {what} with {status} {response.reason}: {gitlab_message(response)}"

    def download(self, url: str, *, what: str, hints: Mapping[int, str] | None = None) -> bytes:
        """A file from the API; where GitLab redirects (to object storage), fetched from
        there without the token."""
        response = self.request("GET", url, what=what, hints=hints, redirect_ok=True)
        location = response.headers.get("Location", "")
        if 300 <= response.status_code < 400 and location:
            location = urllib.parse.urljoin(url, location)
            response = self.request("GET", location, what=f"{what} (redirected)", token=False)
        return response.content

    def json(self, response: requests.Response, *, what: str) -> Any:
        """The JSON body of a successful response."""
        try:
            return response.json()
        except ValueError:
            raise InputError(
                f"GitLab answered {what} with something other than JSON:"
                f" is CI_API_V4_URL ({self.mask(self.api_url)}) GitLab's API?"
            ) from None

    def pages(
        self,
        url: str,
        *,
        what: str,
        params: Mapping[str, str] | None = None,
        hints: Mapping[int, str] | None = None,
    ) -> Iterator[list[Any]]:
        """Each page of a GitLab list, `PER_PAGE` at a time, by X-Next-Page or Link."""
        origin = urllib.parse.urlsplit(self.api_url)[:2]
        query: dict[str, str] | None = {"per_page": str(PER_PAGE), **(params or {})}
        first = query
        for _ in range(MAX_PAGES):
            response = self.request("GET", url, what=what, params=query, hints=hints)
            page = self.json(response, what=what)
            if not isinstance(page, list):
                raise InputError(f"GitLab answered {what} with no list")
            yield page
            next_page = response.headers.get("X-Next-Page", "").strip()
            next_link = response.links.get("next", {}).get("url", "")
            if next_page:
                query = {**(first or {}), "page": next_page}
            elif next_link:
                # GitLab leaves X-Next-Page out of some large lists; the Link header remains
                if urllib.parse.urlsplit(next_link)[:2] != origin:
                    raise InputError(
                        self.mask(
                            f"GitLab's next-page link points to {next_link}, not to"
                            f" {self.api_url}: refusing to send the token there;"
                            " check CI_API_V4_URL and GitLab's external_url"
                        )
                    )
                url, query = next_link, None
            else:
                return
        raise InputError(f"{what}: more than {MAX_PAGES} pages; GitLab's pagination loops")


def _unsent(exc: requests.RequestException) -> bool:
    """Whether a failed request provably never reached GitLab (no connection was made)."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


def gitlab_message(response: requests.Response) -> str:
    """GitLab's own explanation in an error response, shortened to one line."""
    try:
        data = response.json()
        message = data.get("message") or data.get("error") or data
    except (ValueError, AttributeError):
        message = response.text
    text = " ".join(str(message).split())
    return text[:300] + ("…" if len(text) > 300 else "")
