"""gpuci's CI/CD component (templates/gpuci.yml) as a user's project takes it: the example
project in examples/gitlab_project, whose `.gitlab-ci.yml` only includes the component,
run for real by gitlab-ci-local (shell executor, no Docker, no GPU): gpuci's tag pipeline
uploads the release wheel to a fake GitLab, the example's default install takes it from
there, then the check on its CPU suite, the verdict, the note posted to the fake GitLab,
the durations carried by the cache to the next pipeline, which passes against the first
one's verdict with `--allow known`. The component's install from a package index mirror
(`pip-index-url`), and docs/ci.md's recipe for running the pipeline locally
(scripts/local_pipeline.sh). And the component's variants as GitLab would expand them:
one job per mode, included twice, a user's before_script, the example's workflow:rules.

A missing tool skips on a workstation but fails under CI=true (see test_gitlab_ci.py).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from gitlab_pipelines import GitLabWithPipelines
from gitlab_pipelines import Job as PipelineJob
from gitlab_pipelines import Pipeline as GitLabPipeline
from release_wheel import DIST, build_wheel, job_python, version, wheel_of_installed
from test_gitlab_ci import (
    JOB_TOKEN,
    NOTE_TOKEN,
    LocalRunner,
    Pipeline,
    child_env,
    commit_all,
    merge_request_pipeline,
    missing,
    need,
    safe_job_name,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gitlab_project"
COMPONENT = ROOT / "templates" / "gpuci.yml"
ORIGIN = "https://gitlab.example.com/team/example.git"
CHECK_JOB = "gpuci:check"


def component_ref(pipeline: Path) -> tuple[str, str]:
    """The project path and version the example's include names (team/gpuci, 0.1.0)."""
    text = pipeline.read_text(encoding="utf-8")
    found = re.search(r"component: \$CI_SERVER_FQDN/(\S+)/gpuci@(\S+)", text)
    assert found, f"{pipeline}: no include of gpuci's component"
    return found[1], found[2]


class Project(LocalRunner):
    """A copy of a project with its own git repository, in which gitlab-ci-local runs jobs."""

    def __init__(self, tmp_path: Path, source: Path, pipeline: str | None = None) -> None:
        project = tmp_path / "project"
        shutil.copytree(source, project)
        if pipeline is not None:
            (project / ".gitlab-ci.yml").write_text(pipeline, encoding="utf-8")
        commit_all(project, ORIGIN)
        # gitlab-ci-local 4.70.1 resolves `include: component:` itself: from the working
        # tree where it names this project at HEAD, else by a git clone into its include
        # cache, which it reuses as it finds it (no --fetch-includes). The clone would reach
        # gitlab.example.com, so this checkout's component file goes where that clone would
        # leave it, and the project's `.gitlab-ci.yml` runs unchanged.
        where, version = component_ref(project / ".gitlab-ci.yml")
        fetched = project / ".gitlab-ci-local" / "includes" / "gitlab.example.com" / where
        (fetched / version / "templates").mkdir(parents=True)
        shutil.copy2(COMPONENT, fetched / version / "templates" / "gpuci.yml")
        super().__init__(tmp_path, project)

    def config(self) -> dict[str, Any]:
        """The pipeline as gitlab-ci-local expands it (component, inputs, extends applied)."""
        try:
            from ruamel.yaml import YAML  # check-jsonschema's YAML parser
        except ImportError:
            missing("ruamel.yaml (check-jsonschema's)", "it reads gitlab-ci-local's preview")
        result = self.gcl("--preview")
        assert result.returncode == 0, result.stderr
        return YAML(typ="safe").load(result.stdout)  # type: ignore[no-any-return]

    def job_names(self) -> list[str]:
        """The jobs this pipeline runs (rules applied, `parallel:` expanded)."""
        result = self.gcl("--list-json")
        assert result.returncode == 0, result.stderr
        return [job["name"] for job in json.loads(result.stdout) if job["when"] != "never"]

    def run_job(
        self, job: str, variables: dict[str, str], *, install: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run one job with the shell executor, with GitLab's variables `variables`; with
        `install`, the component's own install (else this checkout's gpuci, on PATH)."""
        args = [job, "--shell-isolation", "--force-shell-executor", "--no-color"]
        args += ["--no-artifacts-to-source", "--ignore-predefined-vars", ",".join(variables)]
        overrides = {} if install else {"GPUCI_INSTALL": "true"}
        for name, value in {**overrides, **variables}.items():
            args += ["--variable", f"{name}={value}"]
        return self.gcl(*args)

    def artifacts(self, job: str) -> Path:
        return self.dir / ".gitlab-ci-local" / "artifacts" / safe_job_name(job)

    def log(self, job: str) -> str:
        return (self.dir / ".gitlab-ci-local" / "output" / f"{safe_job_name(job)}.log").read_text(
            "utf-8"
        )


def expected_categories() -> dict[str, tuple[str, list[str] | None]]:
    """examples/gitlab_project/expected.json: each test's category (and culprits)."""
    expected = json.loads((EXAMPLE / "expected.json").read_text(encoding="utf-8"))
    return {
        test_id: (want, None) if isinstance(want, str) else (want["category"], want["culprits"])
        for test_id, want in expected.items()
    }


GPUCI_PROJECT_ID = "1"  # gpuci's own project on the fake GitLab (the example's is 42)


def release(tmp_path: Path, gitlab: GitLabWithPipelines, where: str) -> list[str]:
    """Run gpuci's tag pipeline's release:build for this checkout's version, as project
    `where`, against `gitlab`: the files it uploaded to its package registry."""
    gitlab.paths[GPUCI_PROJECT_ID] = where
    tmp_path.mkdir()
    gpuci = Pipeline(tmp_path)
    gpuci.env = {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    variables = {
        "CI_COMMIT_TAG": version(),
        "CI_PROJECT_ID": GPUCI_PROJECT_ID,
        "CI_PROJECT_PATH": where,
        "CI_API_V4_URL": gitlab.api_url,
        "CI_JOB_TOKEN": JOB_TOKEN,
    }
    args = ["release:build", "--shell-isolation", "--force-shell-executor", "--no-color"]
    args += ["--ignore-predefined-vars", ",".join(variables)]
    for name, value in variables.items():
        args += ["--variable", f"{name}={value}"]
    result = gpuci.gcl(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    uploads = [r for r in gitlab.received if r.method == "PUT"]
    assert all(r.headers.get("job-token") == JOB_TOKEN for r in uploads)
    return sorted(file for (project, _, _, file) in gitlab.packages if project == where)


@pytest.mark.slow
def test_the_example_projects_pipeline_installs_the_release_checks_and_posts_the_note(
    tmp_path: Path,
) -> None:
    # gpuci's tag pipeline (release:build) uploads this checkout's sdist and wheel to its
    # package registry on a fake GitLab; then the example's `.gitlab-ci.yml`, unchanged,
    # its default install too, downloads that wheel from the project it included the
    # component from, and pip installs it into a fresh Python that may reach no package
    # index: a bare `pip install gpuci`, or a wheel from another project, fails the job
    # before its verdict.
    need("curl", "the component's install downloads the wheel with it")
    project = Project(tmp_path, EXAMPLE)
    assert project.job_names() == [CHECK_JOB]  # the default: one job, the screens at once
    where, included = component_ref(EXAMPLE / ".gitlab-ci.yml")
    assert included == version()
    wheel = f"{DIST.replace('-', '_')}-{version()}-py3-none-any.whl"
    python_bin = job_python(tmp_path)
    project.path = f"{python_bin}{os.pathsep}{os.environ.get('PATH', '')}"
    project.env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    with GitLabWithPipelines(token=NOTE_TOKEN, job_token=JOB_TOKEN) as gitlab:
        released = release(tmp_path / "gpuci", gitlab, where)
        assert released == sorted([f"{DIST.replace('-', '_')}-{version()}.tar.gz", wheel])
        gitlab.received.clear()
        variables = merge_request_pipeline(gitlab)
        first = project.run_job(CHECK_JOB, variables, install=True)
        output = first.stdout + first.stderr
        assert first.returncode == 1, output  # the planted bug fails the job, after reporting
        log = project.log(CHECK_JOB)
        for token in (JOB_TOKEN, NOTE_TOKEN):
            assert token not in output + log
        download, *asked = gitlab.received
        assert download.path == (
            f"/api/v4/projects/{where}/packages/generic/{DIST}/{version()}/{wheel}"
        )
        assert download.headers.get("job-token") == JOB_TOKEN
        assert f"gpuci: installing {DIST} {version()} from http://127.0.0.1:" in log
        installed = list(
            python_bin.parent.glob(
                f"lib/python*/site-packages/gpuci_isolation-{version()}.dist-info"
            )
        )
        assert len(installed) == 1, log
        assert (python_bin / "gpuci").exists()
        assert "no durations.json from an earlier pipeline in the cache: a first check" in log

        out = project.artifacts(CHECK_JOB) / "out" / "gpuci"
        verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
        assert verdict["verdict"] == "fail"
        found = {t["id"]: (t["category"], t.get("culprits") or None) for t in verdict["tests"]}
        assert found == expected_categories()
        junit = (out / "junit.xml").read_text(encoding="utf-8")
        assert 'name="[suite] test_forward_allocates_its_activations"' in junit  # GitLab's report
        assert "test_forward_allocates_its_activations" in (out / "report.html").read_text("utf-8")

        # the default branch's latest pipelines were asked for (none yet), then the one note
        assert asked[0].path == "/api/v4/projects/42/pipelines"
        assert asked[0].query["ref"] == "main"
        assert "no baseline" in log
        assert len(gitlab.notes) == 1
        comment = (out / "comment.md").read_text(encoding="utf-8")
        assert comment.strip() in gitlab.notes[0]["body"]

        # the next pipeline: its check starts from the durations the cache carried over, and
        # judges against the default branch's verdict (the first one's, its pipeline failed)
        # with `--allow known`: its verdict passes, says what it allowed, and says it once;
        # the job still exits 1, as its plain pytest run did (DESIGN: the plain run's 1 is
        # never a 0), and says why
        kept = PipelineJob(id=77, name=CHECK_JOB, status="failed")
        kept.artifacts["out/gpuci/verdict.json"] = (out / "verdict.json").read_bytes()
        gitlab.pipelines.append(GitLabPipeline(id=7, ref="main", status="failed", jobs=[kept]))
        variables["GPUCI_DIFF_ARGS"] = "--allow known"
        second = project.run_job(CHECK_JOB, variables, install=True)
        assert second.returncode == 1, second.stdout + second.stderr
        log = project.log(CHECK_JOB)
        assert "plain pytest exited 1 (tests failed, or the session did)" in log
        assert "so does this check, exit 1" in log
        assert "the files' times of an earlier pipeline: .cache/gpuci/durations.json" in log
        assert "--durations .cache/gpuci/durations.json" in log  # gpuci's "reproduce" line
        assert "baseline: job 77 of pipeline 7 (failed)" in log
        verdicts = re.findall(r"^verdict: .*$", log, re.MULTILINE)
        assert verdicts == [
            "verdict: pass (1 known isolation problem allowed — 1 polluter — in 1 test)"
        ]
        assert len(gitlab.notes) == 1  # updated in place, not a second note
        heading = gitlab.notes[0]["body"].splitlines()[1]
        assert heading.startswith("### ✅ gpuci: pass: 1 known isolation problem allowed")
        assert "No isolation problems" not in gitlab.notes[0]["body"]
    durations = json.loads((out / "durations.json").read_text(encoding="utf-8"))
    assert sorted(durations["files"]) == sorted({t.split("::")[0] for t in expected_categories()})


@pytest.mark.slow
def test_the_component_switches_to_one_job_per_mode(tmp_path: Path) -> None:
    where, version = component_ref(EXAMPLE / ".gitlab-ci.yml")
    pipeline = f"""\
include:
  - component: $CI_SERVER_FQDN/{where}/gpuci@{version}
    inputs:
      jobs: modes
      shards: 3
      tags: [gpu, a100]
      paths: tests
      pytest-args: -k 'not slow'
      modes: suite,parallel,threads,isolated
      post-note: false
"""
    project = Project(tmp_path, EXAMPLE, pipeline)
    names = project.job_names()
    shards = [n for n in names if n.startswith("gpuci:isolated: [")]
    assert shards == [f"gpuci:isolated: [{i}/3]" for i in (1, 2, 3)]
    assert sorted(set(names) - set(shards)) == [
        "gpuci:explain",
        "gpuci:parallel",
        "gpuci:suite",
        "gpuci:threads",
        "gpuci:verdict",
    ]
    config = project.config()
    for name in ("gpuci:isolated", "gpuci:parallel", "gpuci:suite", "gpuci:threads"):
        job = config[name]
        assert job["tags"] == ["gpu", "a100"]
        assert job["allow_failure"] is True
        assert "out/gpuci/" in job["artifacts"]["paths"]
        mode = name.split(":")[1]
        assert f"--mode {mode}" in job["script"][-1]
        kernels = [c for c in job["cache"] if ".cache/cupy/" in c["paths"]]
        assert len(kernels) == 1
    assert config["gpuci:isolated"]["parallel"] == 3
    assert config["gpuci:isolated"]["variables"]["GPUCI_PYTEST_ARGS"] == "-k 'not slow'"
    verdict = config["gpuci:verdict"]
    assert {n["job"] for n in verdict["needs"]} == {
        "gpuci:explain",
        "gpuci:isolated",
        "gpuci:parallel",
        "gpuci:suite",
        "gpuci:threads",
    }
    assert verdict["artifacts"]["reports"]["junit"] == "out/gpuci/junit.xml"
    assert verdict["artifacts"]["expose_as"] == "gpuci report"
    assert verdict["variables"]["GPUCI_VERDICT_JOB"] == "gpuci:verdict"
    assert verdict["variables"]["GPUCI_POST_NOTE"] == "false"
    assert "durations.json" in " ".join(config["gpuci:explain"]["artifacts"]["paths"])

    # without threads in `modes`, no threads job; the verdict does not wait for one
    project = Project(tmp_path / "no-threads", EXAMPLE, pipeline.replace("threads,", ""))
    assert "gpuci:threads" not in project.job_names()
    chain = project.gcl("--validate-dependency-chain")
    assert chain.returncode == 0, chain.stdout + chain.stderr


@pytest.mark.slow
def test_the_component_included_twice_keeps_two_sets_of_jobs(tmp_path: Path) -> None:
    where, version_ = component_ref(EXAMPLE / ".gitlab-ci.yml")
    pipeline = f"""\
include:
  - component: $CI_SERVER_FQDN/{where}/gpuci@{version_}
    inputs:
      job-prefix: gpuci-math
      paths: tests/test_math.py
      timeout: 45m
  - component: $CI_SERVER_FQDN/{where}/gpuci@{version_}
    inputs:
      job-prefix: gpuci-model
      paths: tests/test_model.py tests/test_limits.py
      out: out/model
"""
    project = Project(tmp_path, EXAMPLE, pipeline)
    assert sorted(project.job_names()) == ["gpuci-math:check", "gpuci-model:check"]
    config = project.config()
    math, model = config["gpuci-math:check"], config["gpuci-model:check"]
    assert math["variables"]["GPUCI_PATHS"] == "tests/test_math.py"
    assert model["variables"]["GPUCI_PATHS"] == "tests/test_model.py tests/test_limits.py"
    # each judges against its own job's verdict, keeps its own files' times
    assert math["variables"]["GPUCI_VERDICT_JOB"] == "gpuci-math:check"
    assert model["variables"]["GPUCI_VERDICT_JOB"] == "gpuci-model:check"
    assert model["artifacts"]["reports"]["junit"] == "out/model/junit.xml"
    keys = [{c["key"] for c in job["cache"]} for job in (math, model)]
    assert keys == [
        {"gpuci-cupy-kernels", "gpuci-math-durations-$CI_COMMIT_REF_SLUG"},
        {"gpuci-cupy-kernels", "gpuci-model-durations-$CI_COMMIT_REF_SLUG"},
    ]
    # each carries its files' times to the next pipeline, where the check is handed them
    # (--durations), whatever happened to the check
    for job in (math, model):
        (durations,) = [c for c in job["cache"] if "-durations-" in c["key"]]
        assert durations["paths"] == [".cache/gpuci/"]
        assert durations["when"] == "always"
        assert job["variables"]["GPUCI_DURATIONS"] == ".cache/gpuci/durations.json"
    # and a branch's first pipeline starts from the default branch's: gitlab-ci-local's
    # expansion drops `fallback_keys`, so the component's own jobs, its inputs put in as
    # GitLab does
    from ruamel.yaml import YAML  # check-jsonschema's YAML parser, as Project.config's

    text = COMPONENT.read_text(encoding="utf-8").replace("$[[ inputs.job-prefix ]]", "gpuci-math")
    _, jobs = YAML(typ="safe").load_all(text)
    (durations,) = [c for c in jobs[".gpuci-math-base"]["cache"] if "-durations-" in c["key"]]
    assert durations["key"] == "gpuci-math-durations-$CI_COMMIT_REF_SLUG"
    assert durations["fallback_keys"] == ["gpuci-math-durations-$CI_DEFAULT_BRANCH"]
    # GitLab's conventions, each job: a newer pipeline may cancel it, a runner's failure
    # retries it (a failing suite does not), its timeout is an input
    assert (math["timeout"], model["timeout"]) == ("45m", "1h")
    for job in (math, model):
        assert job["interruptible"] is True
        assert job["retry"]["max"] == 2
        assert "runner_system_failure" in job["retry"]["when"]
        assert "script_failure" not in job["retry"]["when"]
        assert "before_script" not in job


@pytest.mark.slow
def test_a_users_before_script_runs_before_the_setup_and_keeps_it(tmp_path: Path) -> None:
    # The user's before_script (a proxy, a venv) was once the component's own, replaced.
    where, version_ = component_ref(EXAMPLE / ".gitlab-ci.yml")
    pipeline = f"""\
include:
  - component: $CI_SERVER_FQDN/{where}/gpuci@{version_}
    inputs:
      paths: tests/test_math.py
      post-note: false

gpuci:check:
  before_script:
    - echo "the user's own before_script ran"
"""
    project = Project(tmp_path, EXAMPLE, pipeline)
    result = project.run_job(CHECK_JOB, {"GPUCI_INSTALL": "echo the component installed gpuci"})
    log = project.log(CHECK_JOB)
    assert result.returncode == 0, result.stdout + result.stderr
    ran = log.index("the user's own before_script ran")
    assert ran < log.index("the component installed gpuci")
    assert "no durations.json from an earlier pipeline in the cache: a first check" in log
    verdict = project.artifacts(CHECK_JOB) / "out" / "gpuci" / "verdict.json"
    assert json.loads(verdict.read_text(encoding="utf-8"))["verdict"] == "pass"


def workflow_probe(tmp_path: Path) -> LocalRunner:
    """The example's workflow:rules as a probe job's rules: gitlab-ci-local 4.70.1 does not
    apply workflow:rules, but evaluates a job's rules as GitLab does."""
    try:
        from ruamel.yaml import YAML
    except ImportError:
        missing("ruamel.yaml (check-jsonschema's)", "it reads the example's pipeline")
    rules = YAML(typ="safe").load(EXAMPLE / ".gitlab-ci.yml")["workflow"]["rules"]
    probe = {"probe": {"script": ["true"], "rules": rules}}
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / ".gitlab-ci.yml").write_text(json.dumps(probe), encoding="utf-8")
    commit_all(tmp_path / "probe", ORIGIN)
    return LocalRunner(tmp_path, tmp_path / "probe")


@pytest.mark.slow  # gitlab-ci-local (Node.js) starts for each
@pytest.mark.parametrize(
    ("variables", "runs"),
    [
        ({"CI_PIPELINE_SOURCE": "merge_request_event"}, True),
        ({"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "main"}, True),
        # a push to a branch with an open merge request: its MR pipeline runs, not this one
        (
            {
                "CI_PIPELINE_SOURCE": "push",
                "CI_COMMIT_BRANCH": "feature",
                "CI_OPEN_MERGE_REQUESTS": "team/example!7",
            },
            False,
        ),
        ({"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "feature"}, False),
    ],
    ids=["merge-request", "default-branch", "branch-with-open-mr", "branch-alone"],
)
def test_the_example_runs_one_pipeline_per_change(
    tmp_path: Path, variables: dict[str, str], runs: bool
) -> None:
    project = workflow_probe(tmp_path)
    variables = {"CI_DEFAULT_BRANCH": "main", **variables}
    args = ["--list-json", "--ignore-predefined-vars", ",".join(variables)]
    for name, value in variables.items():
        args += ["--variable", f"{name}={value}"]
    result = project.gcl(*args)
    assert result.returncode == 0, result.stderr
    (probe,) = json.loads(result.stdout)
    assert (probe["when"] != "never") is runs


@pytest.mark.slow
def test_the_local_recipe_runs_the_example_pipeline(tmp_path: Path) -> None:
    # docs/ci.md's recipe, as a user runs it: scripts/local_pipeline.sh runs the example's
    # pipeline, unchanged, under gitlab-ci-local with the component of this checkout and
    # the gpuci on PATH; plain `gitlab-ci-local` there fails fetching the component
    runner = LocalRunner(tmp_path, EXAMPLE)  # gitlab-ci-local, and this checkout's gpuci shims
    work = tmp_path / "work"
    result = subprocess.run(
        [str(ROOT / "scripts" / "local_pipeline.sh")],
        cwd=tmp_path,
        env=child_env(
            PATH=runner.path, HOME=str(runner.home), NO_COLOR="1", GPUCI_LOCAL_WORK=str(work)
        ),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output  # the planted bug fails the job, after reporting
    where, version_ = component_ref(EXAMPLE / ".gitlab-ci.yml")
    assert f"component gitlab.example.com/{where}/gpuci@{version_}: {COMPONENT}" in output
    copy = work / EXAMPLE.name
    log = (copy / ".gitlab-ci-local" / "output" / f"{safe_job_name(CHECK_JOB)}.log").read_text(
        "utf-8"
    )
    # one verdict in the job's log: the check's, after the policy (no second diff)
    assert re.findall(r"^verdict: \w+", log, re.MULTILINE) == ["verdict: fail"], log
    assert "no baseline (not in a GitLab job" in log  # nothing left the machine
    assert "not in a merge request pipeline" in log
    out = copy / ".gitlab-ci-local" / "artifacts" / safe_job_name(CHECK_JOB) / "out" / "gpuci"
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    found = {t["id"]: (t["category"], t.get("culprits") or None) for t in verdict["tests"]}
    assert found == expected_categories()
    assert (out / "report.html").is_file()
    assert not (EXAMPLE / ".gitlab-ci-local").exists()  # the example itself is untouched


class Mirror:
    """A package index mirror on 127.0.0.1 (PEP 503 simple pages over a directory), which
    records what it was asked for."""

    def __init__(self, root: Path, wheels: list[Path]) -> None:
        for wheel in wheels:
            project = wheel.name.split("-")[0].lower().replace("_", "-")
            page = root / "simple" / project
            page.mkdir(parents=True)
            shutil.copy2(wheel, page / wheel.name)
            link = f'<a href="{wheel.name}">{wheel.name}</a>'
            (page / "index.html").write_text(f"<html><body>{link}</body></html>\n", "utf-8")
        self.asked: list[str] = []
        asked = self.asked

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(root), **kwargs)

            def log_message(self, format: str, *args: Any) -> None:
                asked.append(self.path)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/simple"

    def __enter__(self) -> Mirror:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
def test_the_component_installs_gpuci_and_its_dependencies_from_a_mirror(tmp_path: Path) -> None:
    # `pip-index-url`: the release wheel from gpuci's package registry, one of its
    # dependencies (junitparser, missing from the job's Python) and the install's own
    # package from a mirror, the only index the job's pip is given
    need("curl", "the component's install downloads the wheel with it")
    where, version_ = component_ref(EXAMPLE / ".gitlab-ci.yml")
    dist, packed = tmp_path / "dist", tmp_path / "packed"
    dist.mkdir()
    packed.mkdir()
    wheels = [wheel_of_installed("junitparser", packed)]
    with Mirror(tmp_path / "mirror", wheels) as mirror:
        pipeline = f"""\
include:
  - component: $CI_SERVER_FQDN/{where}/gpuci@{version_}
    inputs:
      paths: tests/test_math.py
      post-note: false
      pip-index-url: {mirror.url}
"""
        project = Project(tmp_path, EXAMPLE, pipeline)
        python_bin = job_python(tmp_path, without=["junitparser"])
        project.path = f"{python_bin}{os.pathsep}{os.environ.get('PATH', '')}"
        project.env = {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        wheel = build_wheel(dist)
        with GitLabWithPipelines(token=NOTE_TOKEN, job_token=JOB_TOKEN) as gitlab:
            gitlab.packages[(where, DIST, version(), wheel.name)] = wheel.read_bytes()
            variables = {"CI_API_V4_URL": gitlab.api_url, "CI_JOB_TOKEN": JOB_TOKEN}
            result = project.run_job(CHECK_JOB, variables, install=True)
    log = project.log(CHECK_JOB)
    assert result.returncode == 0, result.stdout + result.stderr + log
    assert f"gpuci: pip installs from {mirror.url}" in log
    assert any(path.startswith("/simple/junitparser/") for path in mirror.asked), mirror.asked
    assert any(path.endswith(wheels[0].name) for path in mirror.asked), mirror.asked
    installed = list(python_bin.parent.glob("lib/python*/site-packages/junitparser-*.dist-info"))
    assert len(installed) == 1, log
