"""gpuci publish against a real HTTP server on 127.0.0.1 that speaks GitLab's notes API."""

from __future__ import annotations

import email.utils
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from gitlab_server import DROP, FakeGitLab

from gpuci.gitlab.publish import MARKER, NOTE_LIMIT, TRIES, publish_comment
from gpuci.model import InputError

TOKEN = "glpat-Sekr3t-0123456789abcdef"  # noqa: S105 (a test token)
OTHER_USER = 555
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    with FakeGitLab(token=TOKEN) as server:
        yield server


def comment(tmp_path: Path, text: str = f"{MARKER}\n## gpuci: 3 passed\n") -> Path:
    path = tmp_path / "comment.md"
    path.write_text(text, encoding="utf-8")
    return path


def publish(
    path: Path,
    environ: dict[str, str],
    *,
    dry_run: bool = False,
    sleeps: list[float] | None = None,
) -> str:
    """Run publish_comment; its output. Fails the test on a non-zero return."""
    out = io.StringIO()
    code = publish_comment(
        path,
        dry_run=dry_run,
        environ=environ,
        out=out,
        sleep=(sleeps if sleeps is not None else []).append,
    )
    assert code == 0
    return out.getvalue()


def publish_error(
    path: Path, environ: dict[str, str], sleeps: list[float] | None = None
) -> InputError:
    """Run publish_comment expecting an InputError; the error."""
    out = io.StringIO()
    with pytest.raises(InputError) as info:
        publish_comment(
            path,
            dry_run=False,
            environ=environ,
            out=out,
            sleep=(sleeps if sleeps is not None else []).append,
        )
    assert TOKEN not in out.getvalue()
    return info.value


# --- the fake server itself -----------------------------------------------------------


def test_fake_server_paginates_like_gitlab(gitlab: FakeGitLab) -> None:
    for n in range(5):
        gitlab.add_note(body=f"note {n}", author_id=OTHER_USER)
    url = f"{gitlab.api_url}/projects/42/merge_requests/7/notes"
    with requests.Session() as session:
        session.headers["PRIVATE-TOKEN"] = TOKEN
        pages = [
            session.get(url, params={"per_page": "100", "page": str(p)}, timeout=5)
            for p in (1, 2, 3)
        ]
        wrong = session.get(url, headers={"PRIVATE-TOKEN": "nope"}, timeout=5)
    assert [len(p.json()) for p in pages] == [2, 2, 1]
    assert [p.json()[0]["body"] for p in pages] == ["note 4", "note 2", "note 0"]  # newest first
    assert pages[0].headers["X-Next-Page"] == "2"
    assert "X-Next-Page" not in pages[1].headers  # only the Link header leads on
    assert "page=3" in pages[1].links["next"]["url"]
    assert pages[2].headers["X-Next-Page"] == ""
    assert "next" not in pages[2].links
    assert wrong.status_code == 401


# --- creating and updating ------------------------------------------------------------


def test_first_publish_creates_one_note(gitlab: FakeGitLab, tmp_path: Path) -> None:
    path = comment(tmp_path)
    output = publish(path, gitlab.environ())
    assert len(gitlab.notes) == 1
    note = gitlab.notes[0]
    assert note["body"] == path.read_text(encoding="utf-8")
    assert note["author"]["id"] == gitlab.user_id
    assert [(w.method, w.path) for w in gitlab.writes()] == [
        ("POST", "/api/v4/projects/42/merge_requests/7/notes")
    ]
    assert output == (
        f"gpuci: posted note {note['id']} on MR !7 of project 42, {len(note['body'])} characters\n"
    )


def test_second_publish_updates_the_same_note(gitlab: FakeGitLab, tmp_path: Path) -> None:
    publish(comment(tmp_path, f"{MARKER}\nfirst run"), gitlab.environ())
    note_id = gitlab.notes[0]["id"]
    output = publish(comment(tmp_path, f"{MARKER}\nsecond run"), gitlab.environ())
    assert len(gitlab.notes) == 1
    assert gitlab.notes[0]["body"] == f"{MARKER}\nsecond run"
    assert gitlab.writes()[-1].method == "PUT"
    assert gitlab.writes()[-1].path.endswith(f"/notes/{note_id}")
    assert f"updated note {note_id} on MR !7 of project 42" in output


def test_a_comment_without_the_marker_gets_it_so_the_next_run_finds_it(
    gitlab: FakeGitLab, tmp_path: Path
) -> None:
    publish(comment(tmp_path, "no marker here"), gitlab.environ())
    publish(comment(tmp_path, "still none"), gitlab.environ())
    assert [n["body"] for n in gitlab.notes] == [f"{MARKER}\nstill none"]


def test_another_users_note_quoting_the_marker_is_never_touched(
    gitlab: FakeGitLab, tmp_path: Path
) -> None:
    quoted = f"why does gpuci write `{MARKER}`?\n> {MARKER}"
    theirs = gitlab.add_note(body=quoted, author_id=OTHER_USER)
    system = gitlab.add_note(
        body=f"changed the description {MARKER}", author_id=gitlab.user_id, system=True
    )
    publish(comment(tmp_path), gitlab.environ())
    publish(comment(tmp_path, f"{MARKER}\nagain"), gitlab.environ())
    by_id = {n["id"]: n for n in gitlab.notes}
    assert by_id[theirs]["body"] == quoted
    assert by_id[system]["body"] == f"changed the description {MARKER}"
    assert len(gitlab.notes) == 3  # one of ours, created once, then updated
    assert [w.method for w in gitlab.writes()] == ["POST", "PUT"]
    assert not any(w.path.endswith((f"/{theirs}", f"/{system}")) for w in gitlab.writes())


def test_several_own_notes_update_the_newest_and_say_so(gitlab: FakeGitLab, tmp_path: Path) -> None:
    older = gitlab.add_note(body=f"{MARKER}\nold", author_id=gitlab.user_id)
    newer = gitlab.add_note(body=f"{MARKER}\nnewer", author_id=gitlab.user_id)
    gitlab.add_note(body="lgtm", author_id=OTHER_USER)
    output = publish(comment(tmp_path, f"{MARKER}\nnew"), gitlab.environ())
    bodies = {n["id"]: n["body"] for n in gitlab.notes}
    assert bodies[older] == f"{MARKER}\nold"
    assert bodies[newer] == f"{MARKER}\nnew"
    assert "gpuci: 2 gpuci notes by @gpuci-bot on MR !7 of project 42;" in output
    assert f"updating the newest, note {newer}" in output


def test_pagination_finds_our_note_on_a_later_page(gitlab: FakeGitLab, tmp_path: Path) -> None:
    ours = gitlab.add_note(body=f"{MARKER}\nold report", author_id=gitlab.user_id)
    for n in range(5):  # newer notes push ours to page 3 of 2 notes each
        gitlab.add_note(body=f"review comment {n}", author_id=OTHER_USER)
    publish(comment(tmp_path, f"{MARKER}\nnew report"), gitlab.environ())
    pages = [r.query.get("page", "1") for r in gitlab.received if r.path.endswith("/notes")]
    assert pages == ["1", "2", "3"]  # page 2 had no X-Next-Page, only the Link header
    assert [(w.method, w.path.rsplit("/", 1)[-1]) for w in gitlab.writes()] == [("PUT", str(ours))]
    assert len(gitlab.notes) == 6


# --- retries ----------------------------------------------------------------------------


def test_429_waits_for_retry_after_then_succeeds(gitlab: FakeGitLab, tmp_path: Path) -> None:
    gitlab.fail("GET", "/notes", 429, headers={"Retry-After": "7"})
    sleeps: list[float] = []
    output = publish(comment(tmp_path), gitlab.environ(), sleeps=sleeps)
    assert sleeps == [7.0]
    assert len(gitlab.notes) == 1
    assert "GET notes of MR !7 of project 42: HTTP 429; retrying in 7 s (try 2 of 4)" in output


def test_a_429_to_a_post_is_retried_in_place_after_retry_after(
    gitlab: FakeGitLab, tmp_path: Path
) -> None:
    gitlab.fail("POST", "/notes", 429, headers={"Retry-After": "3"})
    sleeps: list[float] = []
    publish(comment(tmp_path), gitlab.environ(), sleeps=sleeps)
    assert sleeps == [3.0]
    assert len(gitlab.notes) == 1  # a 429 is refused before any work: retried in place
    assert [w.method for w in gitlab.writes()] == ["POST", "POST"]


def test_a_retry_after_date_is_honoured(gitlab: FakeGitLab, tmp_path: Path) -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    gitlab.fail("GET", "/user", 429, headers={"Retry-After": when})
    sleeps: list[float] = []
    publish(comment(tmp_path), gitlab.environ(), sleeps=sleeps)
    assert len(sleeps) == 1
    assert 25 < sleeps[0] <= 30


def test_429_wait_is_capped(gitlab: FakeGitLab, tmp_path: Path) -> None:
    gitlab.fail("GET", "/user", 429, headers={"Retry-After": "3600"})
    sleeps: list[float] = []
    publish(comment(tmp_path), gitlab.environ(), sleeps=sleeps)
    assert sleeps == [60.0]


def test_502_once_then_success(gitlab: FakeGitLab, tmp_path: Path) -> None:
    gitlab.fail("GET", "/notes", 502)
    sleeps: list[float] = []
    publish(comment(tmp_path), gitlab.environ(), sleeps=sleeps)
    assert sleeps == [0]  # urllib3 retries at once the first time, then backs off
    assert len(gitlab.notes) == 1


def test_dropped_connection_then_success(gitlab: FakeGitLab, tmp_path: Path) -> None:
    gitlab.fail("GET", "/user", DROP)
    sleeps: list[float] = []
    output = publish(comment(tmp_path), gitlab.environ(), sleeps=sleeps)
    assert sleeps == [0]
    assert "GET /user: ProtocolError" in output
    assert len(gitlab.notes) == 1


def test_502_forever_gives_up_after_bounded_tries(gitlab: FakeGitLab, tmp_path: Path) -> None:
    gitlab.fail("GET", "/notes", 502, times=None)
    sleeps: list[float] = []
    error = publish_error(comment(tmp_path), gitlab.environ(), sleeps)
    assert error.exit_code == 3
    assert str(error) == (
        f"GitLab kept failing on GET notes of MR !7 of project 42 (502 Bad Gateway) after"
        f" {TRIES} tries: check that {gitlab.api_url} is up, then run the job again"
    )
    assert sleeps == [0, 2.0, 4.0]  # urllib3's exponential backoff (backoff_factor 1)
    assert sum(r.path.endswith("/notes") for r in gitlab.received) == TRIES
    assert gitlab.writes() == []


def test_post_answered_502_after_creating_is_not_posted_twice(
    gitlab: FakeGitLab, tmp_path: Path
) -> None:
    gitlab.fail("POST", "/notes", 502, after_write=True)
    sleeps: list[float] = []
    output = publish(comment(tmp_path, f"{MARKER}\nbody"), gitlab.environ(), sleeps=sleeps)
    assert len(gitlab.notes) == 1
    assert gitlab.notes[0]["body"] == f"{MARKER}\nbody"
    assert [w.method for w in gitlab.writes()] == ["POST", "PUT"]
    assert "looking for the note again in 1 s" in output
    assert sleeps == [1.0]


def test_post_502_forever_gives_up(gitlab: FakeGitLab, tmp_path: Path) -> None:
    gitlab.fail("POST", "/notes", 502, times=None)
    sleeps: list[float] = []
    error = publish_error(comment(tmp_path), gitlab.environ(), sleeps)
    assert "kept failing on POST note (502 Bad Gateway) after 4 tries" in str(error)
    assert [w.method for w in gitlab.writes()] == ["POST"] * TRIES
    assert sleeps == [1.0, 2.0, 4.0]


# --- refusals -----------------------------------------------------------------------------


def test_wrong_token_is_a_clear_401(gitlab: FakeGitLab, tmp_path: Path) -> None:
    env = gitlab.environ(GPUCI_GITLAB_TOKEN="glpat-wrong")  # noqa: S106
    error = publish_error(comment(tmp_path), env)
    assert str(error) == (
        "GitLab refused the token (401): set GPUCI_GITLAB_TOKEN to a token with api scope"
        " that has not expired"
    )
    assert error.exit_code == 3


def test_gitlab_token_is_the_fallback_and_named_in_errors(
    gitlab: FakeGitLab, tmp_path: Path
) -> None:
    env = gitlab.environ()
    del env["GPUCI_GITLAB_TOKEN"]
    publish(comment(tmp_path), {**env, "GITLAB_TOKEN": TOKEN})
    assert len(gitlab.notes) == 1
    error = publish_error(comment(tmp_path), {**env, "GITLAB_TOKEN": "stale"})
    assert "set GITLAB_TOKEN to a token with api scope" in str(error)


def test_unknown_project_is_a_clear_404(gitlab: FakeGitLab, tmp_path: Path) -> None:
    error = publish_error(comment(tmp_path), gitlab.environ(CI_PROJECT_ID="99"))
    assert str(error) == (
        f"project 99 or MR !7 not found at {gitlab.api_url}: check CI_PROJECT_ID /"
        " CI_MERGE_REQUEST_IID, or the token cannot see the project"
    )
    assert error.exit_code == 3
    assert gitlab.writes() == []


def test_wrong_api_url_is_named(gitlab: FakeGitLab, tmp_path: Path) -> None:
    env = gitlab.environ(CI_API_V4_URL=gitlab.api_url.replace("/v4", "/v3"))
    error = publish_error(comment(tmp_path), env)
    assert str(error).startswith("no GitLab API at http://127.0.0.1:")
    assert str(error).endswith("/api/v3 (404 on /user): check CI_API_V4_URL")


def test_only_the_job_token_is_refused_before_any_request(
    gitlab: FakeGitLab, tmp_path: Path
) -> None:
    env = gitlab.environ(CI_JOB_TOKEN=TOKEN)
    del env["GPUCI_GITLAB_TOKEN"]
    error = publish_error(comment(tmp_path), env)
    assert str(error).startswith("only CI_JOB_TOKEN is set, and GitLab does not let a job token")
    assert "set GPUCI_GITLAB_TOKEN" in str(error)
    del env["CI_JOB_TOKEN"]
    assert str(publish_error(comment(tmp_path), env)).startswith("no GitLab token: set")
    assert gitlab.received == []


# --- outside a merge request, dry runs, inputs ---------------------------------------------


def test_outside_a_merge_request_pipeline_does_nothing(gitlab: FakeGitLab, tmp_path: Path) -> None:
    env = gitlab.environ()
    del env["CI_MERGE_REQUEST_IID"]
    output = publish(comment(tmp_path), env)
    assert output == (
        "gpuci: not in a merge request pipeline (CI_MERGE_REQUEST_IID unset): nothing to publish\n"
    )
    output = publish(comment(tmp_path), {}, dry_run=True)
    assert output.startswith(
        "gpuci: not in a merge request pipeline (CI_API_V4_URL, CI_PROJECT_ID,"
        " CI_MERGE_REQUEST_IID unset)"
    )
    assert gitlab.received == []


def test_dry_run_reads_but_never_writes(gitlab: FakeGitLab, tmp_path: Path) -> None:
    path = comment(tmp_path)
    size = len(path.read_text(encoding="utf-8"))
    output = publish(path, gitlab.environ(), dry_run=True)
    assert output == (
        f"gpuci: dry run: would post a new note as @gpuci-bot on MR !7 of project 42 at"
        f" {gitlab.api_url}, {size} characters; nothing written\n"
    )
    ours = gitlab.add_note(body=f"{MARKER}\nold", author_id=gitlab.user_id)
    output = publish(path, gitlab.environ(), dry_run=True)
    assert f"would update note {ours} as @gpuci-bot" in output
    assert gitlab.writes() == []
    assert [n["body"] for n in gitlab.notes] == [f"{MARKER}\nold"]
    assert {r.method for r in gitlab.received} == {"GET"}


def test_missing_comment_names_the_file(gitlab: FakeGitLab, tmp_path: Path) -> None:
    missing = tmp_path / "nope.md"
    error = publish_error(missing, gitlab.environ())
    assert str(error) == f"{missing}: no such file (write it with `gpuci report`)"
    (tmp_path / "bad.md").write_bytes(b"\xff\xfe not utf-8")
    assert str(publish_error(tmp_path / "bad.md", gitlab.environ())).startswith(
        f"{tmp_path / 'bad.md'}: not readable as UTF-8 text"
    )
    assert gitlab.received == []


def test_a_comment_over_the_note_limit_is_refused_not_truncated(
    gitlab: FakeGitLab, tmp_path: Path
) -> None:
    at_limit = MARKER + "x" * (NOTE_LIMIT - len(MARKER))
    publish(comment(tmp_path, at_limit), gitlab.environ())
    assert len(gitlab.notes[0]["body"]) == NOTE_LIMIT
    path = comment(tmp_path, at_limit + "y")
    error = publish_error(path, gitlab.environ())
    assert str(error) == (
        f"{path}: 1,000,001 characters, over GitLab's 1,000,000-character note limit:"
        " the report stage must write a shorter comment"
    )
    assert len(gitlab.writes()) == 1


# --- the token stays secret -----------------------------------------------------------------


def test_the_token_appears_nowhere_but_its_header(
    gitlab: FakeGitLab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs: list[str] = []
    errors: list[str] = []
    path = comment(tmp_path)
    outputs.append(publish(path, gitlab.environ()))
    outputs.append(publish(path, gitlab.environ(), dry_run=True))
    # GitLab (or a proxy) echoing the token in an error body
    gitlab.fail("GET", "/notes", 400, body=json.dumps({"message": f"token {TOKEN} is bad"}))
    errors.append(str(publish_error(path, gitlab.environ())))
    assert "GitLab answered GET notes of MR !7 of project 42 with 400 Bad Request" in errors[-1]
    # a token inside CI_API_V4_URL, which error messages quote
    userinfo_url = gitlab.api_url.replace("http://", f"http://gpuci:{TOKEN}@")
    env = gitlab.environ(CI_API_V4_URL=userinfo_url, CI_PROJECT_ID="99")
    errors.append(str(publish_error(path, env)))
    assert "[MASKED]" in errors[-1]
    # retries and a connection that never opens: requests' own exception text
    gitlab.fail("GET", "/user", 503, body=TOKEN, times=None)
    errors.append(str(publish_error(path, gitlab.environ(CI_API_V4_URL=userinfo_url))))
    errors.append(str(publish_error(path, gitlab.environ(CI_API_V4_URL="http://127.0.0.1:9/x"))))
    assert "ConnectionError" in errors[-1]
    captured = capsys.readouterr()
    for text in [*outputs, *errors, captured.out, captured.err]:
        assert TOKEN not in text
    for request in gitlab.received:
        assert TOKEN not in request.body
        assert TOKEN not in request.path
        assert TOKEN not in json.dumps(request.query)
        assert [k for k, v in request.headers.items() if TOKEN in v] == ["private-token"]


def test_redirects_are_not_followed(gitlab: FakeGitLab, tmp_path: Path) -> None:
    # requests would carry the PRIVATE-TOKEN header along to wherever a redirect points
    moved = f"{gitlab.api_url}/user?moved=1"
    gitlab.fail("GET", "/user", 301, headers={"Location": moved})
    error = publish_error(comment(tmp_path), gitlab.environ())
    assert str(error).startswith(f"GitLab redirected GET /user (301) to {moved}: set CI_API_V4_URL")
    assert [r.query for r in gitlab.received] == [{}]


def test_a_next_page_link_to_another_host_is_refused(gitlab: FakeGitLab, tmp_path: Path) -> None:
    elsewhere = "http://203.0.113.9:8080/api/v4/projects/42/merge_requests/7/notes?page=2"
    gitlab.fail("GET", "/notes", 200, headers={"Link": f'<{elsewhere}>; rel="next"'}, body="[]")
    error = publish_error(comment(tmp_path), gitlab.environ())
    assert str(error).startswith(f"GitLab's next-page link points to {elsewhere}, not to")
    assert "refusing to send the token there" in str(error)
    assert gitlab.writes() == []


# --- the real command line ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(
    not (ROOT / "gpuci" / "cli.py").exists(), reason="gpuci/cli.py does not exist yet"
)
def test_cli_publishes_and_exits_3_on_refusal(gitlab: FakeGitLab, tmp_path: Path) -> None:
    path = comment(tmp_path)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CI_", "GPUCI_", "GITLAB_"))}

    def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpuci", "publish", str(path), *args],
            env={**base, "NO_PROXY": "127.0.0.1", **env},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    done = cli(**gitlab.environ())
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("gpuci: posted note ")
    done = cli("--dry-run", **gitlab.environ())
    assert done.returncode == 0
    assert "dry run: would update note" in done.stdout
    done = cli(**gitlab.environ(CI_PROJECT_ID="99"))
    assert done.returncode == 3
    assert "project 99 or MR !7 not found at" in done.stderr
    assert "Traceback" not in done.stderr
    assert TOKEN not in done.stdout + done.stderr
    done = cli()
    assert done.returncode == 0
    assert "not in a merge request pipeline" in done.stdout
    assert len(gitlab.notes) == 1
