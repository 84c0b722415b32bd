"""The GitLab pipeline: `.gitlab-ci.yml` (which includes gpuci's own CI/CD component,
templates/gpuci.yml) against GitLab's CI schema, `verdict.sh`'s exit codes and its use
of the baseline (tests/test_baseline.py fetches it), and the verdict job run for real by
gitlab-ci-local (shell executor, no Docker) on the results fixture in tests/data/ci/.
tests/test_component.py runs a user's project.

A test whose tool (check-jsonschema, gitlab-ci-local, rsync, curl, git) is missing skips
on a workstation but fails under CI=true, so a pipeline never passes by skipping it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import pytest
from gitlab_pipelines import GitLabWithPipelines
from gitlab_pipelines import Job as PipelineJob
from gitlab_pipelines import Pipeline as GitLabPipeline
from gitlab_server import FakeGitLab

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / ".gitlab-ci.yml"
VERDICT_SH = ROOT / "gpuci" / "gitlab" / "verdict.sh"  # in the wheel: the component runs it
FIXTURE = ROOT / "tests" / "data" / "ci" / "out" / "gpu"
BASELINE = ROOT / "tests" / "data" / "diff" / "baseline-verdict.json"  # a gpuci verdict
IN_CI = os.environ.get("CI", "").strip().lower() == "true"
JOB_TOKEN = "jobtok-Sekr3t-0123456789abcdef"  # noqa: S105 (a test token)
NOTE_TOKEN = "glpat-Sekr3t-0123456789abcdef"  # noqa: S105 (a test token)
STEPS = ("merge", "diff", "report", "publish")
VERDICT_JOB = "gpuci:verdict"  # the component's, with `jobs: modes`
GPU_JOB = re.compile(r"gpuci:(?P<mode>\w+)(?:: \[(?P<index>\d+)/(?P<total>\d+)\])?")
# What a child inherits of ours: never a real pipeline's CI, GitLab or proxy variables
# (a test run inside GitLab CI must not talk to the real GitLab), nor gitlab-ci-local's
# GCL_ defaults of whoever runs the tests.
UNINHERITED = re.compile(r"CI|CI_\w*|GITLAB_\w*|GPUCI_\w*|GCL_\w*|\w*_proxy|\w*_PROXY")


def missing(what: str, why: str) -> NoReturn:
    """Skip for want of `what`, but fail under CI=true: a pipeline must not pass by skipping."""
    message = f"{what} is not installed, and {why}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: a missing tool is an error, not a skip)")
    pytest.skip(message)


def need(tool: str, why: str, *, path: str | None = None) -> str:
    """Where `tool` is on PATH (or `path`); `missing` without it."""
    found = shutil.which(tool, path=path)
    if found is None:
        missing(tool, why)
    return found


def child_env(**extra: str) -> dict[str, str]:
    """Our environment without CI, GitLab, gpuci or proxy variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not UNINHERITED.fullmatch(k)}
    return {**env, **extra}


# --- the schema ----------------------------------------------------------------------


def check_jsonschema(pipeline: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema's GitLab schema (vendored in the package: no network) on `pipeline`."""
    tool = shutil.which("check-jsonschema")
    if tool is None:
        try:
            import check_jsonschema  # noqa: F401
        except ImportError:
            missing("check-jsonschema", "it validates the pipeline against GitLab's CI schema")
        command = [sys.executable, "-m", "check_jsonschema"]
    else:
        command = [tool]
    return subprocess.run(
        [*command, "--builtin-schema", "vendor.gitlab-ci", str(pipeline)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.mark.slow
def test_pipeline_matches_gitlab_ci_schema() -> None:
    result = check_jsonschema(PIPELINE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok -- validation done" in result.stdout


@pytest.mark.slow
def test_schema_check_catches_a_broken_pipeline(tmp_path: Path) -> None:
    broken = tmp_path / ".gitlab-ci.yml"
    text = PIPELINE.read_text(encoding="utf-8")
    assert "\n    when: always\n" in text
    broken.write_text(text.replace("\n    when: always\n", "\n    when: sometimes\n"), "utf-8")
    result = check_jsonschema(broken)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "sometimes" in result.stdout


# --- verdict.sh on its own, with a stand-in gpuci -------------------------------------

FAKE_GPUCI = """\
#!/bin/sh
# Records its arguments and exits as the test asks: FAKE_<STEP>_RC, FAKE_DIFF_BASELINE_RC.
printf '%s\\n' "$*" >> "$FAKE_GPUCI_LOG"
case $1 in
    merge) exit "${FAKE_MERGE_RC:-0}" ;;
    diff)
        case " $* " in
            *" --baseline "*) exit "${FAKE_DIFF_BASELINE_RC:-${FAKE_DIFF_RC:-0}}" ;;
        esac
        exit "${FAKE_DIFF_RC:-0}" ;;
    report) exit "${FAKE_REPORT_RC:-0}" ;;
    publish) exit "${FAKE_PUBLISH_RC:-0}" ;;
esac
exit 99
"""


# The baseline fetch's stand-in: logged as a step, no baseline (tests/test_baseline.py
# fetches for real, and test_verdict_sh_diffs_against_the_baseline_it_fetched here).
FAKE_PYTHON3 = """\
#!/bin/sh
printf 'python3 %s\\n' "$*" >> "$FAKE_GPUCI_LOG"
"""


class Job:
    """A directory to run verdict.sh in, with a stand-in `gpuci` (and, unless `python`, a
    stand-in `python3` for the baseline fetch) on PATH."""

    def __init__(self, tmp_path: Path, *, python: bool = False) -> None:
        self.dir = tmp_path / "job"
        (self.dir / "out" / "gpu").mkdir(parents=True)
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        fakes = {"gpuci": FAKE_GPUCI, **({} if python else {"python3": FAKE_PYTHON3})}
        for name, text in fakes.items():
            fake = bin_dir / name
            fake.write_text(text, encoding="utf-8")
            fake.chmod(0o755)
        if python:  # this interpreter, which has gpuci, as the job's python3
            shim = bin_dir / "python3"
            shim.write_text(
                f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" "$@"\n', "utf-8"
            )
            shim.chmod(0o755)
        self.log = tmp_path / "gpuci-calls.log"
        self.path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"

    def run(self, *args: str, **env: str) -> tuple[int, str]:
        """Run the script with `args` and CI variables `env`; its exit code and output."""
        result = subprocess.run(
            [str(VERDICT_SH), *args],
            cwd=self.dir,
            env=child_env(PATH=self.path, FAKE_GPUCI_LOG=str(self.log), **env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
            timeout=120,
        )
        for token in (JOB_TOKEN, NOTE_TOKEN):
            assert token not in result.stdout
        return result.returncode, result.stdout

    def calls(self) -> list[str]:
        """The gpuci command lines the script ran, in order (the baseline fetch left out)."""
        if not self.log.exists():
            return []
        lines = self.log.read_text(encoding="utf-8").splitlines()
        return [line for line in lines if not line.startswith("python3 ")]

    def fetches(self) -> list[str]:
        """The baseline fetches the script ran."""
        lines = self.log.read_text(encoding="utf-8").splitlines() if self.log.exists() else []
        return [line for line in lines if line.startswith("python3 ")]


@pytest.fixture
def job(tmp_path: Path) -> Job:
    return Job(tmp_path)


def test_verdict_sh_is_executable() -> None:
    # Run as a program here: git keeps the bit, an editor may drop it (the component runs
    # it with `sh`, as a wheel may drop it too).
    assert os.access(VERDICT_SH, os.X_OK)
    assert VERDICT_SH.read_text(encoding="utf-8").startswith("#!/bin/sh\n")


def test_verdict_sh_runs_every_step_on_the_results_dir(job: Job) -> None:
    code, output = job.run("out/gpu/", "--allow", "known")
    assert code == 0, output
    assert job.calls() == [
        "merge out/gpu -o out/gpu/junit.xml",
        "diff out/gpu -o out/gpu/verdict.json --allow known",
        "report out/gpu/verdict.json --html out/gpu/report.html --markdown out/gpu/comment.md",
        "publish out/gpu/comment.md",
    ]
    assert job.fetches() == ["python3 -m gpuci.gitlab.baseline out/gpu -o out/gpu/baseline.json"]
    assert output.rstrip().endswith("verdict.sh: exit 0")


@pytest.mark.parametrize(
    ("codes", "ran", "status"),
    [
        pytest.param({"diff": 1}, STEPS, 1, id="verdict-failed-still-reports-and-publishes"),
        pytest.param({"diff": 1, "publish": 3}, STEPS, 1, id="verdict-failure-wins"),
        pytest.param({"diff": 1, "merge": 3}, STEPS, 1, id="verdict-failure-wins-over-merge"),
        pytest.param({"merge": 3}, STEPS, 3, id="merge-failed"),
        pytest.param({"publish": 3}, STEPS, 3, id="publish-failed"),
        pytest.param({"diff": 3}, ("merge", "diff"), 3, id="no-verdict-no-report"),
        pytest.param({"diff": 2}, ("merge", "diff"), 2, id="diff-usage-error"),
        pytest.param({"report": 3}, ("merge", "diff", "report"), 3, id="report-failed"),
        pytest.param({"diff": 1, "report": 3}, ("merge", "diff", "report"), 1, id="both"),
    ],
)
def test_verdict_sh_exit_codes(
    job: Job, codes: dict[str, int], ran: tuple[str, ...], status: int
) -> None:
    env = {f"FAKE_{step.upper()}_RC": str(code) for step, code in codes.items()}
    code, output = job.run("out/gpu", **env)
    assert code == status, output
    assert [call.split()[0] for call in job.calls()] == list(ran)


def test_verdict_sh_posts_no_note_when_told_not_to(job: Job) -> None:
    # the component's `post-note: false`
    code, output = job.run("out/gpu", GPUCI_POST_NOTE="false", FAKE_DIFF_RC="1")
    assert code == 1, output
    assert [call.split()[0] for call in job.calls()] == ["merge", "diff", "report"]
    assert "post-note is false: no note on the merge request" in output


def test_verdict_sh_usage(job: Job) -> None:
    code, output = job.run()
    assert code == 2
    assert "usage: verdict.sh RESULTS_DIR" in output
    assert job.calls() == []


def test_verdict_sh_without_results(job: Job) -> None:
    code, output = job.run("out/nothing")
    assert code == 3
    assert "no results directory out/nothing" in output
    assert job.calls() == []


def test_verdict_sh_diffs_against_the_baseline_it_fetched(tmp_path: Path) -> None:
    # tests/test_baseline.py fetches for real; here the fetched file reaches gpuci diff
    job = Job(tmp_path, python=True)
    with GitLabWithPipelines(token=NOTE_TOKEN, job_token=JOB_TOKEN) as gitlab:
        kept = PipelineJob(id=311, name="verdict", status="failed")
        kept.artifacts["out/gpu/verdict.json"] = BASELINE.read_bytes()
        gitlab.pipelines.append(GitLabPipeline(id=31, ref="main", status="failed", jobs=[kept]))
        env = {
            "CI_API_V4_URL": gitlab.api_url,
            "CI_PROJECT_ID": gitlab.project_id,
            "CI_DEFAULT_BRANCH": "main",
            "CI_JOB_TOKEN": JOB_TOKEN,
        }
        code, output = job.run("out/gpu", "--allow", "known", **env)
    assert code == 0, output
    assert "gpuci: baseline: job 311 of pipeline 31 (failed)" in output
    assert job.calls()[1] == (
        "diff out/gpu --baseline out/gpu/baseline.json -o out/gpu/verdict.json --allow known"
    )


# --- the verdict job, run by gitlab-ci-local ------------------------------------------


def gitlab_ci_local() -> str:
    """gitlab-ci-local from PATH or a project-local `npm install` (node_modules/.bin)."""
    search = f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    tool = need("gitlab-ci-local", "it runs the pipeline's jobs locally", path=search)
    need("rsync", "gitlab-ci-local's shell isolation copies with it")
    need("git", "gitlab-ci-local reads the project's git data")
    return tool


def safe_job_name(name: str) -> str:
    """gitlab-ci-local's folder name for a job (Utils.safeDockerString)."""
    return re.sub(
        r"[^\w-]+",
        lambda m: base64.urlsafe_b64encode(m[0].encode()).decode().rstrip("="),
        name,
        flags=re.ASCII,
    )


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=gpuci", "-c", "user.email=gpuci@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        timeout=60,
    )


def copy_project(dest: Path) -> None:
    """The checkout's files (tracked and not ignored) as a fresh git repo at `dest`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if name.startswith(".gitlab-ci-local/") or not source.is_file():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest / name)
    commit_all(dest, "https://gitlab.example.com/team/gpuci.git")


def commit_all(dest: Path, origin: str) -> None:
    """`dest` as a git repository with one commit and a GitLab-like origin whose default
    branch is main, as gitlab-ci-local expects."""
    git(dest, "init", "-q", "-b", "main")
    git(dest, "config", "user.name", "gpuci")  # gitlab-ci-local reads them
    git(dest, "config", "user.email", "gpuci@example.com")
    git(dest, "add", "-A")
    git(dest, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "pipeline under test")
    git(dest, "remote", "add", "origin", origin)
    git(dest, "update-ref", "refs/remotes/origin/main", "HEAD")
    git(dest, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")


class LocalRunner:
    """gitlab-ci-local in a project directory, with a home of its own and this checkout's
    gpuci on PATH."""

    def __init__(self, tmp_path: Path, project: Path) -> None:
        self.tool = gitlab_ci_local()
        self.dir = project
        self.home = tmp_path / "home"
        self.home.mkdir()
        # `gpuci` in the job is this checkout's, run by this interpreter, which is also the
        # job's `python3` (it finds gpuci's verdict.sh), as the component's install makes it.
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for name, module in (("gpuci", "-m gpuci "), ("python3", "")):
            shim = bin_dir / name
            shim.write_text(
                f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" {module}"$@"\n', "utf-8"
            )
            shim.chmod(0o755)
        self.path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
        self.env: dict[str, str] = {}  # more of gitlab-ci-local's (and so its jobs') environment

    def gcl(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run gitlab-ci-local in the project."""
        return subprocess.run(
            [self.tool, *args],
            cwd=self.dir,
            env=child_env(PATH=self.path, HOME=str(self.home), NO_COLOR="1", **self.env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )


class Pipeline(LocalRunner):
    """A copy of the project in which gitlab-ci-local runs jobs with the shell executor."""

    def __init__(self, tmp_path: Path) -> None:
        project = tmp_path / "project"
        project.mkdir()
        copy_project(project)
        super().__init__(tmp_path, project)

    def jobs(self) -> list[dict[str, Any]]:
        """The pipeline's jobs as gitlab-ci-local lists them (extends and parallel applied)."""
        result = self.gcl("--list-json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    def artifacts(self, job: str) -> Path:
        """Where gitlab-ci-local keeps `job`'s artifacts."""
        return self.dir / ".gitlab-ci-local" / "artifacts" / safe_job_name(job)

    def seed_gpu_artifacts(self) -> dict[str, Path]:
        """Each GPU job's out/gpu/ from the fixture, as if it had run and uploaded it."""
        jobs = self.jobs()
        verdict = next(j for j in jobs if j["name"] == VERDICT_JOB)
        needed = {n["job"] for n in verdict["needs"] if n["artifacts"]}
        seeded = {}
        for job in jobs:
            base = job["name"].split(": [")[0]
            if base not in needed:
                continue
            match = GPU_JOB.fullmatch(job["name"])
            assert match, f"{job['name']}: not a gpuci:<mode> job"
            part = Path("evidence" if match["mode"] == "explain" else match["mode"])
            if match["index"]:
                part /= f"shard-{match['index']}-of-{match['total']}"
            assert (FIXTURE / part).is_dir(), (
                f"the fixture has no {part} for job {job['name']}: run"
                " tests/data/ci/make_results.py with the shards that `parallel:` gives"
            )
            shutil.copytree(FIXTURE / part, self.artifacts(job["name"]) / "out" / "gpu" / part)
            seeded[job["name"]] = part
        return seeded

    def run_verdict(self, variables: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
        """Run the verdict job alone, with the GPU jobs' artifacts seeded."""
        args = [VERDICT_JOB, "--shell-isolation", "--force-shell-executor", "--no-color"]
        args += ["--no-artifacts-to-source"]
        args += ["--ignore-predefined-vars", ",".join(variables)]
        for name, value in {"GPUCI_INSTALL": "true", **variables}.items():
            args += ["--variable", f"{name}={value}"]
        return self.gcl(*args)


def verdict_outputs(pipeline: Pipeline) -> dict[str, Path]:
    """The verdict job's artifacts, where gitlab-ci-local exported them."""
    out = pipeline.artifacts(VERDICT_JOB) / "out" / "gpu"
    names = ("verdict.json", "report.html", "comment.md", "junit.xml")
    return {name: out / name for name in names}


def assert_no_token(result: subprocess.CompletedProcess[str], pipeline: Pipeline) -> None:
    output = pipeline.dir / ".gitlab-ci-local" / "output"
    log = (output / f"{safe_job_name(VERDICT_JOB)}.log").read_text("utf-8")
    for token in (JOB_TOKEN, NOTE_TOKEN):
        assert token not in result.stdout + result.stderr + log


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    """One project copy for the tests that only read the pipeline."""
    return Pipeline(tmp_path_factory.mktemp("pipeline"))


@pytest.mark.slow
def test_pipeline_jobs_as_gitlab_ci_local_sees_them(project: Pipeline) -> None:
    # gpuci's own component, included at this commit, resolved from the working tree
    jobs = {j["name"]: j for j in project.jobs() if j["when"] != "never"}
    gpu = sorted(name for name in jobs if name.startswith("gpuci:"))
    assert [name for name in gpu if not name.startswith("gpuci:isolated: [")] == [
        "gpuci:explain",
        "gpuci:parallel",
        "gpuci:suite",
        "gpuci:threads",
        "gpuci:verdict",
    ]
    shards = [name for name in gpu if name.startswith("gpuci:isolated: [")]
    assert len(shards) >= 2  # sharded with `parallel:`
    modes = [name for name in gpu if name not in ("gpuci:explain", VERDICT_JOB)]
    assert all(jobs[name]["allow_failure"] for name in modes)
    verdict = jobs[VERDICT_JOB]
    assert verdict["when"] == "always"
    assert sorted((n["job"], n["artifacts"]) for n in verdict["needs"]) == [
        ("gpuci:explain", True),
        ("gpuci:isolated", True),
        ("gpuci:parallel", True),
        ("gpuci:suite", True),
        ("gpuci:threads", True),
    ]
    assert jobs["gpuci:explain"]["when"] == "always"
    assert jobs["check"]["when"] == "on_success"


def preview(project: Pipeline) -> str:
    """The pipeline as gitlab-ci-local expands it: includes, inputs, extends, anchors."""
    result = project.gcl("--preview")
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_the_expanded_pipeline_matches_gitlab_ci_schema(project: Pipeline, tmp_path: Path) -> None:
    expanded = tmp_path / "expanded.yml"
    expanded.write_text(preview(project), encoding="utf-8")
    result = check_jsonschema(expanded)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_pipeline_jobs_as_gitlab_would_run_them(project: Pipeline) -> None:
    try:
        from ruamel.yaml import YAML  # check-jsonschema's YAML parser
    except ImportError:
        missing("ruamel.yaml (check-jsonschema's)", "it reads gitlab-ci-local's preview")
    config = YAML(typ="safe").load(preview(project))

    rules = " ".join(rule["if"] for rule in config["workflow"]["rules"])
    assert '$CI_PIPELINE_SOURCE == "merge_request_event"' in rules
    assert "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH" in rules
    assert "nox -s lint tests" in config["check"]["script"]
    assert "gpu" not in config["check"].get("tags", [])

    assert config["gpuci:isolated"]["parallel"] >= 2
    for mode in ("isolated", "parallel", "suite", "threads"):
        job = config[f"gpuci:{mode}"]
        assert job["tags"] == ["gpu"]
        assert job["variables"]["GPUCI_PATHS"] == "tests/gpu"
        assert job["variables"]["GPUCI_OUT"] == "out/gpu"
        # the setup is the script's first step (a user's before_script cannot replace it)
        assert 'eval "$GPUCI_INSTALL"' in job["script"][0]
        assert "before_script" not in job
        assert f"gpuci run $GPUCI_PATHS --mode {mode} " in job["script"][-1]
        assert job["artifacts"]["when"] == "always"
        assert "out/gpu/" in job["artifacts"]["paths"]
        kernels = job["variables"]["CUPY_CACHE_DIR"]
        assert kernels.startswith("$CI_PROJECT_DIR/")
        cached = [
            c for c in job["cache"] if f"{kernels.removeprefix('$CI_PROJECT_DIR/')}/" in c["paths"]
        ]
        assert len(cached) == 1
        assert cached[0]["when"] == "always"

    verdict = config[VERDICT_JOB]
    assert verdict["script"][-1] == 'sh "$GPUCI_VERDICT_SH" "$GPUCI_OUT" $GPUCI_DIFF_ARGS'
    artifacts = verdict["artifacts"]
    assert artifacts["when"] == "always"
    assert artifacts["expose_as"]
    assert artifacts["reports"]["junit"] == "out/gpu/junit.xml"
    # the merge request links the report alone: GitLab leaves out the paths that use a
    # variable; $GPUCI_OUT/verdict.json is also where the baseline is fetched from
    assert [path for path in artifacts["paths"] if "$" not in path] == ["out/gpu/report.html"]
    assert verdict["variables"]["GPUCI_OUT"] == "out/gpu"
    for name in ("verdict.json", "comment.md", "junit.xml"):
        assert f"$GPUCI_OUT/{name}" in artifacts["paths"]


REGRESSIONS = {
    "tests/gpu/test_softmax.py::test_rows[fp16]": "order-dependent",
    "tests/gpu/test_pool.py::test_reuse": "concurrency",
    "tests/gpu/test_scan.py::test_cached_plan": "thread-unsafe",
}


@pytest.mark.slow
def test_verdict_job_fails_on_new_regressions_after_reporting(tmp_path: Path) -> None:
    need("curl", "verdict.sh downloads the baseline with it")
    pipeline = Pipeline(tmp_path)
    seeded = pipeline.seed_gpu_artifacts()
    assert sorted(map(str, seeded.values())) == [
        "evidence",
        "isolated/shard-1-of-2",
        "isolated/shard-2-of-2",
        "parallel",
        "suite",
        "threads",
    ]
    # A pipeline of the default branch, which has no finished pipeline yet.
    with GitLabWithPipelines(token=NOTE_TOKEN, job_token=JOB_TOKEN) as gitlab:
        result = pipeline.run_verdict(
            {"CI_API_V4_URL": gitlab.api_url, "CI_PROJECT_ID": "42", "CI_JOB_TOKEN": JOB_TOKEN}
        )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output  # the job failed: gitlab-ci-local says so
    assert_no_token(result, pipeline)
    assert [(r.path, r.query) for r in gitlab.received] == [
        (
            "/api/v4/projects/42/pipelines",
            {"ref": "main", "scope": "finished", "order_by": "id", "sort": "desc", "per_page": "5"},
        )
    ]
    assert gitlab.received[0].headers["job-token"] == JOB_TOKEN
    assert "no gpuci:verdict job with artifacts in branch main" in output
    assert "no baseline" in output

    outputs = verdict_outputs(pipeline)
    verdict = json.loads(outputs["verdict.json"].read_text(encoding="utf-8"))
    assert verdict["schema"] == "gpuci.verdict/1"
    assert verdict["verdict"] == "fail"
    assert {t["id"]: t["category"] for t in verdict["tests"]} == {
        **REGRESSIONS,
        "tests/gpu/test_scan.py::test_empty": "failed",
        "tests/gpu/test_pool.py::test_limit": "skipped",
        "tests/gpu/test_softmax.py::test_rows[fp32]": "passed",
        "tests/gpu/test_scan.py::test_scan": "passed",
    }
    assert all(t["new"] is None for t in verdict["tests"])  # no baseline, no "known"
    # gpu:explain's evidence reached the verdict: each regression names its culprit
    searched = ("tests/gpu/test_softmax.py::test_rows[fp16]", "tests/gpu/test_pool.py::test_reuse")
    culprits = {t["id"]: t.get("culprits") for t in verdict["tests"] if t["id"] in searched}
    assert culprits == {
        "tests/gpu/test_softmax.py::test_rows[fp16]": [
            "tests/gpu/test_softmax.py::test_rows[fp32]"
        ],
        "tests/gpu/test_pool.py::test_reuse": ["tests/gpu/test_scan.py"],
    }
    assert sorted(r["victims"] for r in verdict["roots"]) == [[i] for i in sorted(searched)]
    assert sorted(verdict["modes"]) == ["isolated", "parallel", "suite", "threads"]
    assert verdict["modes"]["isolated"]["shards"] == 2
    assert verdict["modes"]["isolated"]["missing_shards"] == []

    # The report and the comment were written, and publish ran, before the job failed.
    html = outputs["report.html"].read_text(encoding="utf-8")
    comment = outputs["comment.md"].read_text(encoding="utf-8")
    for test_id in REGRESSIONS:
        assert test_id.split("::")[1] in html
        assert test_id.split("::")[1] in comment
    assert "not in a merge request pipeline" in output
    assert "verdict.sh: exit 1" in output

    junit = outputs["junit.xml"].read_text(encoding="utf-8")
    assert junit.count("<testcase ") == 28  # 7 tests, 4 modes, shards merged
    for mode in ("isolated", "parallel", "suite", "threads"):
        assert junit.count(f'name="[{mode}] ') == 7


def merge_request_pipeline(gitlab: FakeGitLab, **extra: str) -> dict[str, str]:
    """A merge-request pipeline's variables into main, aimed at `gitlab`, with a job token."""
    return gitlab.environ(
        CI_PIPELINE_SOURCE="merge_request_event",
        CI_MERGE_REQUEST_TARGET_BRANCH_NAME="main",
        CI_JOB_TOKEN=JOB_TOKEN,
        **extra,
    )


@pytest.mark.slow
def test_verdict_job_in_a_merge_request_passes_with_known_regressions(tmp_path: Path) -> None:
    need("curl", "verdict.sh downloads the baseline with it")
    pipeline = Pipeline(tmp_path)
    pipeline.seed_gpu_artifacts()
    # The target branch's verdict already had both regressions and the failure.
    results = tmp_path / "target-branch" / "gpu"
    shutil.copytree(FIXTURE, results)
    baseline = tmp_path / "baseline.json"
    diff = subprocess.run(
        [sys.executable, "-m", "gpuci", "diff", str(results), "-o", str(baseline)],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert diff.returncode == 1, diff.stdout + diff.stderr

    # The default branch's latest pipeline failed on those findings: GitLab's
    # artifacts-by-ref would serve none: that pipeline did not succeed.
    with GitLabWithPipelines(job_token=JOB_TOKEN, token=NOTE_TOKEN) as gitlab:
        verdict_job = PipelineJob(id=77, name=VERDICT_JOB, status="failed")
        verdict_job.artifacts["out/gpu/verdict.json"] = baseline.read_bytes()
        gitlab.pipelines.append(
            GitLabPipeline(id=7, ref="main", status="failed", jobs=[verdict_job])
        )
        result = pipeline.run_verdict(
            merge_request_pipeline(gitlab, GPUCI_DIFF_ARGS="--allow known,failed")
        )
    output = result.stdout + result.stderr
    # allowed, the verdict passes; the job exits 1 as the plain pytest run (the suite
    # mode's) did: the plain run's 1 is never a 0 (DESIGN), and the log says why
    assert result.returncode == 1, output
    assert "so does this check, exit 1" in output
    assert_no_token(result, pipeline)
    assert "baseline: job 77 of pipeline 7 (failed)" in output

    verdict = json.loads(verdict_outputs(pipeline)["verdict.json"].read_text(encoding="utf-8"))
    assert verdict["verdict"] == "pass"
    assert {t["id"]: t["new"] for t in verdict["tests"] if t["id"] in REGRESSIONS} == dict.fromkeys(
        REGRESSIONS, False
    )

    # The baseline came with the job token, which did not follow the redirect to storage;
    # the note went with the API token, which never went to the CI endpoints.
    listed, jobs, artifact, storage, *api = gitlab.received
    assert (listed.path, jobs.path) == (
        "/api/v4/projects/42/pipelines",
        "/api/v4/projects/42/pipelines/7/jobs",
    )
    assert artifact.path == "/api/v4/projects/42/jobs/77/artifacts/out/gpu/verdict.json"
    for request in (listed, jobs, artifact):
        assert request.headers.get("job-token") == JOB_TOKEN
        assert "private-token" not in request.headers
    assert storage.path.startswith("/storage/")
    assert "job-token" not in storage.headers
    assert "private-token" not in storage.headers
    assert api
    assert all(r.headers.get("private-token") == NOTE_TOKEN for r in api)
    assert all("job-token" not in r.headers for r in api)
    comment = verdict_outputs(pipeline)["comment.md"].read_text(encoding="utf-8")
    assert len(gitlab.notes) == 1
    assert gitlab.notes[0]["author"]["id"] == gitlab.user_id
    assert comment.strip() in gitlab.notes[0]["body"]


@pytest.mark.slow
def test_a_tag_pipeline_releases(project: Pipeline) -> None:
    # A tag X.Y.Z adds release:build (check, build, upload to the package registry) and
    # release:publish (the `release:` keyword: GitLab's release and the catalog version).
    def release_jobs(*variables: str) -> dict[str, str]:
        args = ["--list-json"]
        for variable in variables:
            args += ["--variable", variable]
        result = project.gcl(*args)
        assert result.returncode == 0, result.stderr
        jobs = json.loads(result.stdout)
        return {j["name"]: j["when"] for j in jobs if j["name"].startswith("release:")}

    assert release_jobs() == {"release:build": "never", "release:publish": "never"}
    tagged = release_jobs("CI_COMMIT_TAG=0.1.0")
    assert tagged == {"release:build": "on_success", "release:publish": "on_success"}

    try:
        from ruamel.yaml import YAML
    except ImportError:
        missing("ruamel.yaml (check-jsonschema's)", "it reads gitlab-ci-local's preview")
    config = YAML(typ="safe").load(preview(project))
    assert "release" in config["stages"]
    build, publish = config["release:build"], config["release:publish"]
    assert build["script"][0].startswith('python3 scripts/release_check.py "$CI_COMMIT_TAG"')
    assert any("packages/generic/gpuci-isolation/$CI_COMMIT_TAG" in s for s in build["script"])
    assert publish["release"]["tag_name"] == "$CI_COMMIT_TAG"
    assert publish["release"]["description"] == "./release-notes.md"
    links = [link["url"] for link in publish["release"]["assets"]["links"]]
    assert all("/packages/generic/gpuci-isolation/$CI_COMMIT_TAG/" in url for url in links)
    assert [n["job"] if isinstance(n, dict) else n for n in publish["needs"]] == ["release:build"]
    assert (build["interruptible"], publish["interruptible"]) == (False, False)
