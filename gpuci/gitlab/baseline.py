"""The baseline: the target branch's verdict.json, fetched from GitLab in a job.

    python -m gpuci.gitlab.baseline RESULTS_DIR [-o FILE]

Writes FILE (default RESULTS_DIR/baseline.json) with the verdict.json that the job named
GPUCI_VERDICT_JOB (default `verdict`) kept as an artifact at RESULTS_DIR/verdict.json, in
the newest of the target branch's last `PIPELINES` finished pipelines that ran it,
failed or not (CI_MERGE_REQUEST_TARGET_BRANCH_NAME, else CI_DEFAULT_BRANCH; never this
pipeline, CI_PIPELINE_ID). Not GitLab's artifacts-by-ref endpoint: it serves only the
latest *successful* pipeline's, and a branch's pipeline fails while it has findings, so
`--allow known` could never see them.

A baseline is optional: whatever goes wrong (not in a job, no such job, GitLab refusing
or away, a file that is not a gpuci verdict) is said in one line, FILE is left absent and
the exit code is 0; the check then counts every isolation problem as new. Exit 2 only
for a usage error.

The job token (CI_JOB_TOKEN) asks first; where there is none, or GitLab refuses it (401,
403, 404: GitLab Free refuses it on these endpoints), GPUCI_GITLAB_TOKEN asks. A token
goes only to CI_API_V4_URL's host; the artifact's redirect (object storage) is followed
without one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from gpuci.gitlab.client import Client, Refused, Token
from gpuci.model import GpuciError, InputError
from gpuci.verdict.diff import read_baseline

PIPELINES = 5  # how many of the branch's latest finished pipelines may lack the job
DEFAULT_JOB = "verdict"
FINISHED = ("success", "failed")  # a job whose verdict.json was written
REFUSED_JOB_TOKEN = (401, 403, 404)  # then GPUCI_GITLAB_TOKEN may read


class NoBaseline(Exception):
    """Why there is no baseline (said, never an error of the job)."""


def tokens(environ: Mapping[str, str]) -> list[Token]:
    """The tokens to ask with, in order: the job token, then GPUCI_GITLAB_TOKEN."""
    found = []
    for header, variable in (
        ("JOB-TOKEN", "CI_JOB_TOKEN"),
        ("PRIVATE-TOKEN", "GPUCI_GITLAB_TOKEN"),
    ):
        value = environ.get(variable, "").strip()
        if value:
            found.append(Token(header=header, value=value, variable=variable))
    return found


def fetch_baseline(
    results: str,
    dest: Path,
    *,
    environ: Mapping[str, str],
    out: TextIO = sys.stdout,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Write the baseline to `dest`; whether there is one. Says why where there is none."""
    dest.unlink(missing_ok=True)  # never a stale baseline from an earlier job
    asking = tokens(environ)
    secrets = [t.value for t in asking]
    clients = [
        Client(environ.get("CI_API_V4_URL", "").strip(), t, out=out, sleep=sleep, secrets=secrets)
        for t in asking
    ]
    say = clients[0].say if clients else (lambda line: print(f"gpuci: {line}", file=out))
    partial = dest.with_name(dest.name + ".part")
    try:
        data = _fetch(results, environ, clients, say)
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(data)
        # what `gpuci diff --baseline` could not read is no baseline, said now
        read_baseline(partial)
    except (NoBaseline, GpuciError) as why:  # GitLab's errors come masked
        partial.unlink(missing_ok=True)
        say(f"no baseline ({why}): every isolation problem counts as new")
        return False
    partial.replace(dest)
    say(f"baseline: {dest}")
    return True


def _fetch(
    results: str, environ: Mapping[str, str], clients: Sequence[Client], say: Callable[[str], None]
) -> bytes:
    api_url = environ.get("CI_API_V4_URL", "").strip().rstrip("/")
    project = environ.get("CI_PROJECT_ID", "").strip()
    ref = (
        environ.get("CI_MERGE_REQUEST_TARGET_BRANCH_NAME", "").strip()
        or environ.get("CI_DEFAULT_BRANCH", "").strip()
    )
    if not (api_url and project and ref and clients):
        missing = [
            name
            for name, value in (
                ("CI_API_V4_URL", api_url),
                ("CI_PROJECT_ID", project),
                ("CI_MERGE_REQUEST_TARGET_BRANCH_NAME or CI_DEFAULT_BRANCH", ref),
                ("CI_JOB_TOKEN or GPUCI_GITLAB_TOKEN", "x" if clients else ""),
            )
            if not value
        ]
        raise NoBaseline(f"not in a GitLab job: {', '.join(missing)} unset")
    if urllib.parse.urlsplit(api_url).scheme not in {"http", "https"}:
        raise NoBaseline("CI_API_V4_URL is not an http(s) URL")
    job = environ.get("GPUCI_VERDICT_JOB", "").strip() or DEFAULT_JOB
    api = f"{api_url}/projects/{urllib.parse.quote(project, safe='')}"
    this_pipeline = environ.get("CI_PIPELINE_ID", "").strip()
    say(f"baseline: the {job} job of branch {ref}'s latest finished pipelines")
    asker = Asker(clients, say)
    listed = asker.first_page(
        f"{api}/pipelines",
        what=f"GET pipelines of branch {ref}",
        params={"ref": ref, "scope": "finished", "order_by": "id", "sort": "desc"},
        per_page=PIPELINES,
    )
    pipelines = [
        (str(_field(p, "id", "pipelines")), str(p.get("status", "?")))
        for p in listed
        if str(_field(p, "id", "pipelines")) != this_pipeline
    ]
    for pipeline, status in pipelines:
        jobs = asker.all_pages(
            f"{api}/pipelines/{pipeline}/jobs", what=f"GET jobs of pipeline {pipeline}"
        )
        found = newest_verdict_job(jobs, job)
        if found is None:
            continue
        say(f"baseline: job {found} of pipeline {pipeline} ({status})")
        path = urllib.parse.quote(f"{artifact_path(results)}/verdict.json")
        return asker.download(
            f"{api}/jobs/{found}/artifacts/{path}", what=f"GET job {found}'s verdict.json"
        )
    raise NoBaseline(
        f"no {job} job with artifacts in branch {ref}'s latest {PIPELINES} finished pipelines"
    )


class Asker:
    """Asks with the job token first; once GitLab refuses it, with the next token."""

    def __init__(self, clients: Sequence[Client], say: Callable[[str], None]) -> None:
        self.clients = list(clients)
        self.say = say

    def _ask(self, call: Callable[[Client], Any]) -> Any:
        while True:
            client = self.clients[0]
            try:
                return call(client)
            except Refused as refused:
                if refused.status not in REFUSED_JOB_TOKEN or len(self.clients) == 1:
                    raise
                following = self.clients[1].token.variable
                self.say(
                    f"GitLab answered the {client.token.variable} with HTTP {refused.status};"
                    f" once more with {following}"
                )
                self.clients.pop(0)

    def first_page(
        self, url: str, *, what: str, params: Mapping[str, str], per_page: int
    ) -> list[Any]:
        """The first `per_page` items of a list."""

        def call(client: Client) -> Any:
            query = {**params, "per_page": str(per_page)}
            return _listed(
                client.json(client.request("GET", url, what=what, params=query), what=what), what
            )

        return self._ask(call)  # type: ignore[no-any-return]

    def all_pages(self, url: str, *, what: str) -> list[Any]:
        """Every item of a list, all pages."""
        return self._ask(  # type: ignore[no-any-return]
            lambda client: [item for page in client.pages(url, what=what) for item in page]
        )

    def download(self, url: str, *, what: str) -> bytes:
        """A file, its redirect followed without a token."""
        return self._ask(lambda client: client.download(url, what=what))  # type: ignore[no-any-return]


def newest_verdict_job(jobs: Sequence[Any], name: str) -> str | None:
    """The id of the newest job named `name` that finished and kept an artifacts archive."""
    candidates = []
    for job in jobs:
        if not isinstance(job, dict):
            raise InputError(
                "GitLab's list of jobs is not what its API returns: a job is no object"
            )
        kept = any(
            isinstance(a, dict) and a.get("file_type") == "archive"
            for a in job.get("artifacts") or []
        )
        if job.get("name") == name and job.get("status") in FINISHED and kept:
            candidates.append(int(_field(job, "id", "jobs")))
    return str(max(candidates)) if candidates else None


def artifact_path(results: str) -> str:
    """RESULTS_DIR as a path inside the project: where the earlier job wrote it too."""
    path = Path(results)
    if path.is_absolute():
        try:
            path = path.relative_to(Path.cwd())
        except ValueError:
            raise NoBaseline(f"{results} is outside the project directory") from None
    return path.as_posix().rstrip("/")


def _field(item: Any, name: str, what: str) -> Any:
    if not isinstance(item, dict) or name not in item:
        raise InputError(f"GitLab's list of {what} is not what its API returns: no {name!r}")
    return item[name]


def _listed(data: Any, what: str) -> list[Any]:
    if not isinstance(data, list):
        raise InputError(f"GitLab answered {what} with no list")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m gpuci.gitlab.baseline RESULTS_DIR [-o FILE]`: 0 with or without a baseline."""
    parser = argparse.ArgumentParser(
        prog="python -m gpuci.gitlab.baseline",
        description="Fetch the target branch's verdict.json (a GitLab job's baseline).",
    )
    parser.add_argument("results", metavar="RESULTS_DIR", help="where the jobs write verdict.json")
    parser.add_argument("-o", "--output", type=Path, help="default: RESULTS_DIR/baseline.json")
    args = parser.parse_args(argv)
    dest = args.output or Path(args.results) / "baseline.json"
    fetch_baseline(args.results, dest, environ=os.environ)
    return 0


if __name__ == "__main__":
    sys.exit(main())
