"""A small real HTTP server on 127.0.0.1 that speaks GitLab's merge request notes API.

It serves `GET /api/v4/user`, `GET`/`POST /api/v4/projects/:id/merge_requests/:iid/notes`
and `PUT .../notes/:note_id` for one project and one merge request, checks the
``PRIVATE-TOKEN`` header (401 when it is wrong), paginates like GitLab (``per_page``
capped at `max_per_page`; ``X-Next-Page`` on odd pages, only a ``Link: rel="next"``
header on even ones, as GitLab omits some headers on large lists), sorts notes newest
first by default, and records every request. `fail` queues faults: an HTTP status
with headers, or a dropped connection, once, several times or forever.

    with FakeGitLab(token="t") as gitlab:
        gitlab.add_note(body="hello", author_id=gitlab.user_id)
        ... gitlab.api_url ...
"""

from __future__ import annotations

import json
import re
import socket
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

NOTES_PATH = re.compile(
    r"^/api/v4/projects/(?P<project>[^/]+)/merge_requests/(?P<iid>[^/]+)/notes(?:/(?P<note>\d+))?$"
)
DROP = 0  # a fault status that closes the connection without an answer


@dataclass(slots=True, kw_only=True)
class Received:
    """One request as the server saw it."""

    method: str
    path: str  # without the query
    query: dict[str, str]
    headers: dict[str, str]
    body: str
    data: bytes = b""  # the body as sent (an uploaded file)


@dataclass(slots=True, kw_only=True)
class Fault:
    """An answer the server gives instead of the normal one."""

    method: str
    path_contains: str
    status: int  # DROP closes the connection
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    times: int | None = 1  # None: forever
    after_write: bool = False  # do the write first, then answer with the fault


class FakeGitLab:
    """GitLab's notes API for one project and merge request, on a loopback port."""

    def __init__(
        self,
        *,
        token: str,
        user_id: int = 101,
        username: str = "gpuci-bot",
        project_id: str = "42",
        mr_iid: str = "7",
        max_per_page: int = 2,
    ) -> None:
        self.token = token
        self.user_id = user_id
        self.username = username
        self.project_id = project_id
        self.mr_iid = mr_iid
        self.max_per_page = max_per_page
        self.notes: list[dict[str, Any]] = []
        self.received: list[Received] = []
        self.faults: list[Fault] = []
        self.lock = threading.Lock()
        self._next_id = 1000
        self._clock = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # --- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> FakeGitLab:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    @property
    def api_url(self) -> str:
        """The CI_API_V4_URL of this server."""
        return f"http://127.0.0.1:{self._server.server_port}/api/v4"

    def environ(self, **extra: str) -> dict[str, str]:
        """The CI variables of a merge request pipeline aimed at this server."""
        return {
            "CI_API_V4_URL": self.api_url,
            "CI_PROJECT_ID": self.project_id,
            "CI_MERGE_REQUEST_IID": self.mr_iid,
            "GPUCI_GITLAB_TOKEN": self.token,
            **extra,
        }

    # --- state ------------------------------------------------------------------------

    def add_note(self, *, body: str, author_id: int, system: bool = False) -> int:
        """Put a note on the merge request, as if `author_id` had written it; its id."""
        with self.lock:
            return self._create(body, author_id, system=system)["id"]  # type: ignore[no-any-return]

    def fail(
        self,
        method: str,
        path_contains: str,
        status: int,
        *,
        headers: dict[str, str] | None = None,
        body: str = "",
        times: int | None = 1,
        after_write: bool = False,
    ) -> None:
        """Answer the next `times` matching requests with `status` (DROP: hang up)."""
        with self.lock:
            self.faults.append(
                Fault(
                    method=method,
                    path_contains=path_contains,
                    status=status,
                    headers=headers or {},
                    body=body,
                    times=times,
                    after_write=after_write,
                )
            )

    def writes(self) -> list[Received]:
        """The POST and PUT requests received."""
        return [r for r in self.received if r.method in {"POST", "PUT"}]

    def _create(self, body: str, author_id: int, *, system: bool = False) -> dict[str, Any]:
        self._next_id += 1
        self._clock += 1
        stamp = f"2026-11-21T14:{self._clock // 60:02d}:{self._clock % 60:02d}.000Z"
        note: dict[str, Any] = {
            "id": self._next_id,
            "type": None,
            "body": body,
            "author": {"id": author_id, "username": f"user{author_id}", "name": "Someone"},
            "created_at": stamp,
            "updated_at": stamp,
            "system": system,
            "noteable_id": 5000,
            "noteable_type": "MergeRequest",
            "noteable_iid": int(self.mr_iid),
            "resolvable": False,
        }
        if author_id == self.user_id:
            note["author"]["username"] = self.username
        self.notes.append(note)
        return note

    def _take_fault(self, method: str, path: str) -> Fault | None:
        for fault in self.faults:
            if fault.method == method and fault.path_contains in path:
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times == 0:
                        self.faults.remove(fault)
                return fault
        return None

    # --- the API ----------------------------------------------------------------------

    def answer(self, request: Received) -> tuple[int, dict[str, str], Any]:
        """Status, headers and JSON body for one request (under the lock)."""
        if request.headers.get("private-token") != self.token:
            return 401, {}, {"message": "401 Unauthorized"}
        if request.path == "/api/v4/user" and request.method == "GET":
            return 200, {}, {"id": self.user_id, "username": self.username, "state": "active"}
        match = NOTES_PATH.match(request.path)
        if not match:
            return 404, {}, {"error": "404 Not Found"}
        if match["project"] != self.project_id:
            return 404, {}, {"message": "404 Project Not Found"}
        if match["iid"] != self.mr_iid:
            return 404, {}, {"message": "404 Not found"}
        return self._answer_notes(request, match["note"])

    def _answer_notes(
        self, request: Received, note_id: str | None
    ) -> tuple[int, dict[str, str], Any]:
        body = _body_param(request)
        if note_id is None and request.method == "GET":
            return self._list(request)
        if request.method not in {"POST", "PUT"} or (request.method == "PUT") != bool(note_id):
            return 405, {}, {"message": "405 Method Not Allowed"}
        if body is None:
            return 400, {}, {"message": "400 Bad request - body is missing"}
        if note_id is None:
            return 201, {}, self._create(body, self.user_id)
        return self._update(int(note_id), body)

    def _update(self, note_id: int, body: str) -> tuple[int, dict[str, str], Any]:
        note = next((n for n in self.notes if n["id"] == note_id), None)
        if note is None:
            return 404, {}, {"message": "404 Note Not Found"}
        if note["author"]["id"] != self.user_id:
            return 403, {}, {"message": "403 Forbidden"}
        note["body"] = body
        return 200, {}, note

    def _list(self, request: Received) -> tuple[int, dict[str, str], Any]:
        ordered = sorted(
            self.notes,
            key=lambda n: (n["created_at"], n["id"]),
            reverse=request.query.get("sort", "desc") == "desc",
        )
        return self.paged(request, ordered)

    def paged(self, request: Received, ordered: list[Any]) -> tuple[int, dict[str, str], Any]:
        """One page of `ordered`, with GitLab's paging headers."""
        per_page = min(int(request.query.get("per_page", "20")), self.max_per_page)
        page = int(request.query.get("page", "1"))
        chunk = ordered[(page - 1) * per_page : page * per_page]
        last = max(1, -(-len(ordered) // per_page))
        headers = {"X-Page": str(page), "X-Per-Page": str(per_page), "X-Total": str(len(ordered))}
        headers["X-Total-Pages"] = str(last)
        links = []
        if page < last:
            if page % 2 == 1:  # even pages carry only the Link header
                headers["X-Next-Page"] = str(page + 1)
            query = {**request.query, "page": str(page + 1), "per_page": str(per_page)}
            links.append(f'<{self._url(request.path, query)}>; rel="next"')
        else:
            headers["X-Next-Page"] = ""  # as GitLab sends it on the last page
        links.append(f'<{self._url(request.path, {**request.query, "page": "1"})}>; rel="first"')
        headers["Link"] = ", ".join(links)
        return 200, headers, chunk

    def _url(self, path: str, query: dict[str, str]) -> str:
        query_string = urllib.parse.urlencode(query)
        return f"http://127.0.0.1:{self._server.server_port}{path}?{query_string}"


def _body_param(request: Received) -> str | None:
    """The `body` parameter, sent as JSON or as a form."""
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            data = json.loads(request.body)
        except ValueError:
            return None
        body = data.get("body") if isinstance(data, dict) else None
        return body if isinstance(body, str) else None
    values = urllib.parse.parse_qs(request.body).get("body")
    return values[0] if values else None


def _handler_for(gitlab: FakeGitLab) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as GitLab does

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep pytest's captured output for the client's lines

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length) if length else b""
            split = urllib.parse.urlsplit(self.path)
            request = Received(
                method=self.command,
                path=urllib.parse.unquote(split.path),
                query=dict(urllib.parse.parse_qsl(split.query)),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=raw.decode("utf-8", "replace"),
                data=raw,
            )
            with gitlab.lock:
                gitlab.received.append(request)
                fault = gitlab._take_fault(request.method, request.path)
                if fault is not None and fault.after_write:
                    gitlab.answer(request)
                if fault is None:
                    status, headers, data = gitlab.answer(request)
            if fault is not None:
                if fault.status == DROP:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)  # the client sees a hang-up
                    return
                status, headers, data = fault.status, fault.headers, None
            if fault is not None:
                payload = fault.body.encode()
            elif isinstance(data, bytes):  # a file: an artifact, a package
                payload = data
            else:
                payload = json.dumps(data).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = _serve

    return Handler
