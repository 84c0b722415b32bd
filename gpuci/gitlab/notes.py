"""The GitLab API for one merge request's notes: who the token is, gpuci's note, writing it.

Requests, retries, paging and masking are the shared client's (`gpuci.gitlab.client`).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuci.gitlab.client import Client, Token
from gpuci.model import InputError
from gpuci.run.disk.masking import mask_secrets

MARKER = "<!-- gpuci-report -->"
MR_VARIABLES = ("CI_API_V4_URL", "CI_PROJECT_ID", "CI_MERGE_REQUEST_IID")
TOKEN_VARIABLES = ("GPUCI_GITLAB_TOKEN", "GITLAB_TOKEN")


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


def token_of(target: Target) -> Token:
    """The target's token as the client sends it."""
    return Token(header="PRIVATE-TOKEN", value=target.token, variable=target.token_variable)


class Notes:
    """The notes of one merge request, through `client`."""

    def __init__(self, target: Target, client: Client) -> None:
        self.target = target
        self.client = client
        variable = target.token_variable
        self.hints = {
            401: f"GitLab refused the token (401): set {variable} to a token with api scope"
            " that has not expired",
            404: f"project {target.project_id} or MR !{target.mr_iid} not found at"
            f" {target.api_url}: check CI_PROJECT_ID / CI_MERGE_REQUEST_IID, or the token"
            " cannot see the project",
        }

    def say(self, line: str) -> None:
        """Print one line, token masked."""
        self.client.say(line)

    def _hints(self, what: str) -> dict[int, str]:
        return {
            **self.hints,
            403: f"GitLab forbade {what} (403): the token in {self.target.token_variable}"
            f" needs api scope and the right to comment on {self.target.label}",
        }

    def user(self) -> tuple[int, str]:
        """The token's user: id and username."""
        what = "GET /user"
        hints = {
            **self._hints(what),
            404: f"no GitLab API at {self.target.api_url} (404 on /user): check CI_API_V4_URL",
        }
        response = self.client.request("GET", f"{self.target.api_url}/user", what=what, hints=hints)
        user = self.client.json(response, what=what)
        if not isinstance(user, dict) or not isinstance(user.get("id"), int):
            raise InputError("GitLab's answer to GET /user has no user id: check CI_API_V4_URL")
        return user["id"], str(user.get("username", user["id"]))

    def own_notes(self, user_id: int) -> list[dict[str, Any]]:
        """Every note on the merge request that gpuci posted as `user_id`, all pages."""
        what = f"GET notes of {self.target.label}"
        pages = self.client.pages(self.target.notes_url, what=what, hints=self._hints(what))
        return [note for page in pages for note in page if is_own_note(note, user_id)]

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
        what = f"PUT note {note_id}"
        url = f"{self.target.notes_url}/{note_id}"
        self.client.request("PUT", url, what=what, body=body, hints=self._hints(what))

    def create(self, body: str) -> int:
        """Post a new note; its id. Raises MaybeWritten when the outcome is unknown."""
        what = f"POST note on {self.target.label}"
        response = self.client.request(
            "POST", self.target.notes_url, what=what, body=body, hints=self._hints(what)
        )
        note = self.client.json(response, what=what)
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
