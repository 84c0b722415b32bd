"""FakeGitLab with a project's pipelines, jobs, artifacts and generic packages, as a job
of another pipeline reaches them: what `gpuci.gitlab.baseline` reads the baseline from and what the
component's install downloads gpuci's release wheel from.

It answers `GET /projects/:id/pipelines` (`ref`, `scope=finished`, newest first),
`.../pipelines/:id/jobs`, `.../jobs/:id/artifacts/*path` (a redirect to object storage,
which serves without a token) and `.../packages/generic/:name/:version/:file`
(GET, and PUT to upload), to a request with the job token or the API token; the notes API
as FakeGitLab does. A project is named by its path, or by an id that `paths` maps to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gitlab_server import FakeGitLab, Received

STORAGE = "/storage/artifacts/"  # object storage: no token goes there
FINISHED = ("success", "failed", "canceled", "skipped")


@dataclass(slots=True, kw_only=True)
class Job:
    """One job of a pipeline, with the files of its artifacts archive."""

    id: int
    name: str
    status: str
    artifacts: dict[str, bytes] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class Pipeline:
    """One pipeline of a ref."""

    id: int
    ref: str
    status: str
    jobs: list[Job] = field(default_factory=list)


class GitLabWithPipelines(FakeGitLab):
    """FakeGitLab that also serves pipelines, their jobs' artifacts and generic packages."""

    def __init__(self, *, job_token: str, job_token_reads: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_token = job_token
        self.job_token_reads = job_token_reads  # False: GitLab Free's 403 to the job token
        self.pipelines: list[Pipeline] = []
        # (project path, package, version, file name) -> the file
        self.packages: dict[tuple[str, str, str, str], bytes] = {}
        self.paths: dict[str, str] = {}  # a project's id -> its path (the API takes either)

    def answer(self, request: Received) -> tuple[int, dict[str, str], Any]:
        """Storage without a token; the project's CI endpoints with either token; else notes."""
        if request.path.startswith(STORAGE):
            job_id, _, path = request.path.removeprefix(STORAGE).partition("/")
            return self._artifact(int(job_id), path)
        found = re.fullmatch(
            r"/api/v4/projects/(?P<project>.+?)/(?P<rest>(?:pipelines|jobs|packages)\b.*)",
            request.path,
        )
        if found is None:
            return super().answer(request)
        if request.headers.get("private-token") != self.token:
            if request.headers.get("job-token") != self.job_token:
                return 401, {}, {"message": "401 Unauthorized"}
            if not self.job_token_reads:
                return 403, {}, {"message": "403 Forbidden"}
        project = self.paths.get(found["project"], found["project"])
        if request.method == "PUT":
            return self._upload(project, found["rest"], request.data)
        return self._ci(project, found["rest"], request)

    def _upload(self, project: str, rest: str, data: bytes) -> tuple[int, dict[str, str], Any]:
        """A generic package's file, uploaded (`curl --upload-file`)."""
        package = re.fullmatch(r"packages/generic/([^/]+)/([^/]+)/([^/]+)", rest)
        if package is None:
            return 405, {}, {"message": "405 Method Not Allowed"}
        self.packages[(project, *package.groups())] = data
        return 201, {}, {"message": "201 Created"}

    def _ci(self, project: str, rest: str, request: Received) -> tuple[int, dict[str, str], Any]:
        query = request.query
        package = re.fullmatch(r"packages/generic/([^/]+)/([^/]+)/([^/]+)", rest)
        if package is not None:
            key = (project, *package.groups())
            found = self.packages.get(key)
            return (200, {}, found) if found else (404, {}, {"message": "404 Package Not Found"})
        if project != self.paths.get(self.project_id, self.project_id):
            return 404, {}, {"message": "404 Project Not Found"}
        if rest == "pipelines":
            listed = [p for p in self.pipelines if p.ref == query.get("ref", p.ref)]
            if query.get("scope") == "finished":
                listed = [p for p in listed if p.status in FINISHED]
            listed.sort(key=lambda p: -p.id)
            listed = listed[: int(query.get("per_page", "20"))]  # one page: all it is asked for
            return 200, {}, [{"id": p.id, "ref": p.ref, "status": p.status} for p in listed]
        jobs = re.fullmatch(r"pipelines/(\d+)/jobs", rest)
        pipeline = next((p for p in self.pipelines if jobs and p.id == int(jobs[1])), None)
        if pipeline is not None:
            newest_first = sorted(pipeline.jobs, key=lambda job: -job.id)
            return self.paged(request, [_job_json(job) for job in newest_first])
        artifact = re.fullmatch(r"jobs/(\d+)/artifacts/(.+)", rest)
        if artifact is not None:
            location = f"{self.api_url.removesuffix('/api/v4')}{STORAGE}{artifact[1]}/{artifact[2]}"
            return 302, {"Location": location}, b""
        return 404, {}, {"message": "404 Not Found"}

    def _artifact(self, job_id: int, path: str) -> tuple[int, dict[str, str], Any]:
        for pipeline in self.pipelines:
            for job in pipeline.jobs:
                if job.id == job_id and path in job.artifacts:
                    return 200, {}, job.artifacts[path]
        return 404, {}, {"message": "404 Not Found"}


def _job_json(job: Job) -> dict[str, Any]:
    """A job as GitLab's jobs API lists it (the fields the baseline fetch reads)."""
    archive = [{"file_type": "archive", "filename": "artifacts.zip"}] if job.artifacts else []
    return {"id": job.id, "name": job.name, "status": job.status, "artifacts": archive}
