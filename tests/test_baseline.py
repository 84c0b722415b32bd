"""The baseline fetch (`python -m gpuci.gitlab.baseline`) against a real HTTP server on
127.0.0.1 that serves GitLab's pipelines, jobs and artifacts (tests/gitlab_pipelines.py):
every case the shell fetch it replaced handled, and the shared client's retries, paging
and refusals on these endpoints.

The shell's cases, each kept: the target branch (the merge request's, else the default);
its latest 5 finished pipelines, newest first, never this one; the newest job of the
name that finished (success or failed) and kept an archive; pipelines without it passed
over; the job token first, GPUCI_GITLAB_TOKEN where it is refused (GitLab Free) or absent;
the artifact's redirect followed without a token; a branch name with "/" one segment;
a trailing "/" on CI_API_V4_URL; no CI variables, no token, a wrong token, an unreachable
API, an answer that is not GitLab's: no baseline, said, and nothing left behind; a file
`gpuci diff` could not read dropped. `curl` missing is gone with curl.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from gitlab_pipelines import GitLabWithPipelines, Job, Pipeline
from gitlab_server import DROP

from gpuci.gitlab.baseline import PIPELINES, fetch_baseline

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tests" / "data" / "diff" / "baseline-verdict.json"
JOB_TOKEN = "jobtok-Sekr3t-0123456789abcdef"  # noqa: S105 (a test token)
NOTE_TOKEN = "glpat-Sekr3t-0123456789abcdef"  # noqa: S105 (a test token)
TARGET = "release/1.2"  # a branch name with "/": one path segment, percent-encoded
KEPT = "out/gpu/verdict.json"


@pytest.fixture
def gitlab() -> Iterator[GitLabWithPipelines]:
    with GitLabWithPipelines(token=NOTE_TOKEN, job_token=JOB_TOKEN) as server:
        yield server


def verdict_of(label: str) -> bytes:
    """A gpuci verdict that `gpuci diff --baseline` reads, told apart by `label`."""
    data = json.loads(BASELINE.read_text(encoding="utf-8"))
    data["environment"] = {**data.get("environment", {}), "label": label}
    return json.dumps(data).encode()


def branch_history(gitlab: GitLabWithPipelines, ref: str = TARGET) -> None:
    """The branch's pipelines: a passing one, a newer one that failed on its findings (its
    verdict job failed and kept its verdict), one still running; another branch's."""
    gitlab.pipelines += [
        Pipeline(
            id=30,
            ref=ref,
            status="success",
            jobs=[
                Job(id=300, name="verdict", status="success", artifacts={KEPT: verdict_of("pass")})
            ],
        ),
        Pipeline(
            id=31,
            ref=ref,
            status="failed",
            jobs=[
                Job(id=310, name="lint", status="success"),
                Job(id=311, name="verdict", status="failed", artifacts={KEPT: verdict_of("fail")}),
            ],
        ),
        Pipeline(
            id=32, ref=ref, status="running", jobs=[Job(id=320, name="verdict", status="running")]
        ),
        Pipeline(
            id=33,
            ref="other",
            status="failed",
            jobs=[
                Job(id=330, name="verdict", status="failed", artifacts={KEPT: verdict_of("other")})
            ],
        ),
    ]


def mr_env(gitlab: GitLabWithPipelines, **extra: str) -> dict[str, str]:
    return {
        "CI_API_V4_URL": f"{gitlab.api_url}/",
        "CI_PROJECT_ID": gitlab.project_id,
        "CI_PIPELINE_ID": "34",
        "CI_JOB_TOKEN": JOB_TOKEN,
        "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": TARGET,
        "CI_DEFAULT_BRANCH": "main",
        **extra,
    }


def assert_no_fragment(text: str, token: str) -> None:
    """No 6 consecutive characters of `token` past its public prefix (DESIGN, Secrets)."""
    secret = token.split("-", 1)[1] if "-" in token[:7] else token
    for start in range(len(secret) - 5):
        assert secret[start : start + 6] not in text, f"a fragment of a token: {text!r}"


class Fetched:
    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.dest = tmp_path / "out" / "gpu" / "baseline.json"
        self.out = io.StringIO()
        self.sleeps: list[float] = []
        self.found = fetch_baseline(
            "out/gpu", self.dest, environ=env, out=self.out, sleep=self.sleeps.append
        )
        self.output = self.out.getvalue()
        for token in (JOB_TOKEN, NOTE_TOKEN, env.get("CI_JOB_TOKEN", "")):
            assert_no_fragment(self.output, token)

    def label(self) -> str:
        return str(json.loads(self.dest.read_bytes())["environment"]["label"])


def asked(gitlab: GitLabWithPipelines) -> list[str]:
    """The paths asked for, with their queries."""
    return [
        f"{r.path}?{'&'.join(f'{k}={v}' for k, v in r.query.items())}".rstrip("?")
        for r in gitlab.received
    ]


def test_the_baseline_is_the_latest_finished_pipelines_failed_or_not(
    gitlab: GitLabWithPipelines, tmp_path: Path
) -> None:
    # GitLab's artifacts-by-ref would serve pipeline 30's (its latest successful one): the
    # branch's findings since would never be `known`.
    branch_history(gitlab)
    fetched = Fetched(tmp_path, mr_env(gitlab, GPUCI_GITLAB_TOKEN=NOTE_TOKEN))
    assert fetched.found, fetched.output
    assert fetched.label() == "fail"
    assert asked(gitlab) == [
        f"/api/v4/projects/42/pipelines?ref={TARGET}&scope=finished&order_by=id&sort=desc"
        f"&per_page={PIPELINES}",
        "/api/v4/projects/42/pipelines/31/jobs?per_page=100",
        f"/api/v4/projects/42/jobs/311/artifacts/{KEPT}",
        f"/storage/artifacts/311/{KEPT}",
    ]
    *api, storage = gitlab.received
    assert all(r.headers.get("job-token") == JOB_TOKEN for r in api)
    assert all("private-token" not in r.headers for r in api)
    assert "job-token" not in storage.headers  # object storage sees no token
    assert "baseline: job 311 of pipeline 31 (failed)" in fetched.output
    assert sorted(p.name for p in fetched.dest.parent.iterdir()) == ["baseline.json"]


def test_pipelines_without_the_job_are_passed_over(
    gitlab: GitLabWithPipelines, tmp_path: Path
) -> None:
    branch_history(gitlab)
    gitlab.pipelines.append(
        Pipeline(
            id=35, ref=TARGET, status="success", jobs=[Job(id=350, name="docs", status="success")]
        )
    )
    fetched = Fetched(tmp_path, mr_env(gitlab))
    assert fetched.label() == "fail"
    assert "/api/v4/projects/42/pipelines/35/jobs" in [r.path for r in gitlab.received]


def test_this_pipeline_is_never_its_own_baseline(
    gitlab: GitLabWithPipelines, tmp_path: Path
) -> None:
    branch_history(gitlab)
    fetched = Fetched(tmp_path, mr_env(gitlab, CI_PIPELINE_ID="31"))
    assert fetched.label() == "pass"
    assert "/api/v4/projects/42/pipelines/31/jobs" not in [r.path for r in gitlab.received]


def test_the_job_list_is_read_to_its_last_page(gitlab: GitLabWithPipelines, tmp_path: Path) -> None:
    # the shell read one page of 100 jobs: a big pipeline's verdict job could be on page 2
    jobs = [Job(id=400 + n, name=f"test {n}", status="success") for n in range(150)]
    jobs.append(Job(id=900, name="verdict", status="failed", artifacts={KEPT: verdict_of("paged")}))
    gitlab.pipelines.append(Pipeline(id=40, ref=TARGET, status="failed", jobs=jobs))
    gitlab.max_per_page = 20
    fetched = Fetched(tmp_path, mr_env(gitlab))
    assert fetched.label() == "paged", fetched.output
    pages = [r.query.get("page", "1") for r in gitlab.received if r.path.endswith("/jobs")]
    assert pages == [str(n) for n in range(1, 9)]  # X-Next-Page on odd pages, Link on even


def test_the_api_token_asks_where_the_job_token_is_refused(
    gitlab: GitLabWithPipelines, tmp_path: Path
) -> None:
    # GitLab Free refuses the job token on these endpoints: GPUCI_GITLAB_TOKEN may read
    gitlab.job_token_reads = False
    branch_history(gitlab)
    fetched = Fetched(tmp_path, mr_env(gitlab, GPUCI_GITLAB_TOKEN=NOTE_TOKEN))
    assert fetched.label() == "fail"
    *api, storage = gitlab.received
    # refused once, then every request with the API token
    assert [r.headers.get("job-token") == JOB_TOKEN for r in api] == [True, False, False, False]
    assert [r.headers.get("private-token") == NOTE_TOKEN for r in api] == [False, True, True, True]
    assert "private-token" not in storage.headers
    assert "the CI_JOB_TOKEN with HTTP 403; once more with GPUCI_GITLAB_TOKEN" in fetched.output


def test_the_api_token_alone_asks(gitlab: GitLabWithPipelines, tmp_path: Path) -> None:
    branch_history(gitlab)
    env = mr_env(gitlab, GPUCI_GITLAB_TOKEN=NOTE_TOKEN)
    del env["CI_JOB_TOKEN"]
    fetched = Fetched(tmp_path, env)
    assert fetched.label() == "fail"
    assert all(r.headers.get("private-token") == NOTE_TOKEN for r in gitlab.received[:-1])


def test_the_default_branch_outside_a_merge_request(
    gitlab: GitLabWithPipelines, tmp_path: Path
) -> None:
    branch_history(gitlab, ref="main")
    env = mr_env(gitlab)
    del env["CI_MERGE_REQUEST_TARGET_BRANCH_NAME"]
    fetched = Fetched(tmp_path, env)
    assert gitlab.received[0].query["ref"] == "main"
    assert fetched.label() == "fail"


def test_retry_after_and_5xx_backoff_on_the_way(
    gitlab: GitLabWithPipelines, tmp_path: Path
) -> None:
    branch_history(gitlab)
    gitlab.fail("GET", "/pipelines", 429, headers={"Retry-After": "5"})
    gitlab.fail("GET", "/jobs", 503, times=2)
    gitlab.fail("GET", "/storage/", DROP)
    fetched = Fetched(tmp_path, mr_env(gitlab))
    assert fetched.label() == "fail"
    assert fetched.sleeps == [5.0, 0, 2.0, 0]  # Retry-After; then urllib3's backoff per request
    assert (
        f"GET pipelines of branch {TARGET}: HTTP 429; retrying in 5 s (try 2 of 4)"
        in fetched.output
    )
    assert "GET jobs of pipeline 31: HTTP 503; retrying in 2 s (try 3 of 4)" in fetched.output


def dead_url() -> str:
    """A loopback URL where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/api/v4"


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("no-pipeline", f"no verdict job with artifacts in branch {TARGET}'s latest 5"),
        ("no-verdict-job", f"no gpuci:verdict job with artifacts in branch {TARGET}'s latest 5"),
        ("wrong-token", "GitLab refused the token in CI_JOB_TOKEN (401)"),
        ("forbidden", "GitLab forbade GET pipelines of branch release/1.2 (403) to the token in"),
        ("unreachable", "failed after 4 tries (ConnectionError"),
        ("no-token", "not in a GitLab job: CI_JOB_TOKEN or GPUCI_GITLAB_TOKEN unset"),
        ("no-ci", "not in a GitLab job: CI_API_V4_URL, CI_PROJECT_ID,"),
        ("garbled", "GitLab answered GET jobs of pipeline 31 with something other than JSON"),
        ("not-a-verdict", "--baseline:"),
        ("5xx-forever", "GitLab kept failing on GET pipelines of branch release/1.2 (502"),
    ],
)
def test_no_baseline_is_said_and_leaves_nothing(
    gitlab: GitLabWithPipelines, tmp_path: Path, case: str, said: str
) -> None:
    env = mr_env(gitlab)
    branch_history(gitlab, ref="main" if case == "no-pipeline" else TARGET)
    if case == "no-verdict-job":
        env["GPUCI_VERDICT_JOB"] = "gpuci:verdict"
    elif case == "wrong-token":
        env["CI_JOB_TOKEN"] = "jobtok-wrong-0123456789"  # noqa: S105 (a test token)
    elif case == "forbidden":
        gitlab.job_token_reads = False  # and no GPUCI_GITLAB_TOKEN to ask with
    elif case == "unreachable":
        env["CI_API_V4_URL"] = dead_url()
    elif case == "no-token":
        del env["CI_JOB_TOKEN"]
    elif case == "no-ci":
        env = {"CI_JOB_TOKEN": JOB_TOKEN}
    elif case == "garbled":  # a proxy's error page, say
        gitlab.fail("GET", "/pipelines/31/jobs", 200, body="<html>busy</html>")
    elif case == "not-a-verdict":
        gitlab.pipelines[1].jobs[1].artifacts[KEPT] = b'{"schema": "gpuci.verdict/1"}'
    elif case == "5xx-forever":
        gitlab.fail("GET", "/pipelines", 502, times=None)
    (tmp_path / "out" / "gpu").mkdir(parents=True)
    stale = tmp_path / "out" / "gpu" / "baseline.json"
    stale.write_text("an earlier job's", encoding="utf-8")
    fetched = Fetched(tmp_path, env)
    assert not fetched.found
    assert said in fetched.output
    assert fetched.output.rstrip().endswith("every isolation problem counts as new")
    assert list((tmp_path / "out" / "gpu").iterdir()) == []  # nothing left, stale removed


@pytest.mark.slow  # three interpreters
def test_the_command_line_never_fails_the_job(gitlab: GitLabWithPipelines, tmp_path: Path) -> None:
    branch_history(gitlab)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CI_", "GPUCI_", "GITLAB_"))}

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpuci.gitlab.baseline", *args],
            env={**base, "NO_PROXY": "127.0.0.1", **env},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    done = run("out/gpu", **mr_env(gitlab))
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    assert (tmp_path / "out" / "gpu" / "baseline.json").read_bytes() == verdict_of("fail")
    done = run("out/gpu", "-o", "elsewhere.json", **mr_env(gitlab, CI_JOB_TOKEN="wrong-token-0123"))  # noqa: S106
    assert done.returncode == 0
    assert "GitLab refused the token in CI_JOB_TOKEN (401)" in done.stdout
    for token in (JOB_TOKEN, "wrong-token-0123"):
        assert_no_fragment(done.stdout + done.stderr, token)
    assert not (tmp_path / "elsewhere.json").exists()
    done = run()
    assert done.returncode == 2
    assert "RESULTS_DIR" in done.stderr
