"""A release of gpuci: its distribution name, its one version and the places that must name
it, the tag pipeline's check (scripts/release_check.py), the wheel the component installs,
and the component's inputs as GitLab validates them (`regex`: gitlab-ci-local 4.70.1 does
not apply it, so these tests do, with Python's `re` on patterns RE2 reads the same).
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from release_wheel import DIST, ROOT, build_wheel, version
from test_gitlab_ci import missing

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

COMPONENT = ROOT / "templates" / "gpuci.yml"
RELEASE_CHECK = ROOT / "scripts" / "release_check.py"
EXAMPLE_CI = ROOT / "examples" / "gitlab_project" / ".gitlab-ci.yml"
# Inputs whose value is a shell command by design: no regex can tell a good one.
COMMANDS = {"install"}


def spec_inputs() -> dict[str, dict[str, Any]]:
    """The component's `spec: inputs:` as GitLab reads them."""
    try:
        from ruamel.yaml import YAML  # check-jsonschema's YAML parser
    except ImportError:
        missing("ruamel.yaml (check-jsonschema's)", "it reads the component's spec")
    header = COMPONENT.read_text(encoding="utf-8").split("\n---\n", 1)[0]
    return YAML(typ="safe").load(header)["spec"]["inputs"]  # type: ignore[no-any-return]


def release_check(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RELEASE_CHECK), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_the_distribution_has_a_name_of_its_own() -> None:
    # PyPI's `gpuci` is another project: pip must never be asked for that name.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DIST != "gpuci"
    assert project["scripts"] == {"gpuci": "gpuci.cli:main"}  # the command keeps its name
    assert project["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License\n")


def test_every_include_names_the_version_a_release_makes_real() -> None:
    includes = {
        path: re.findall(r"component: \$CI_SERVER_FQDN/\S+/gpuci@(\S+)", path.read_text("utf-8"))
        for path in (ROOT / "README.md", ROOT / "docs" / "ci.md", EXAMPLE_CI)
    }
    assert all(includes.values()), includes
    assert {v for found in includes.values() for v in found} == {version()}
    assert f"\n## {version()}\n" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def test_the_release_check_passes_this_version_and_writes_its_notes(tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    result = release_check(version(), "team/gpuci", "--notes", str(notes))
    assert result.returncode == 0, result.stderr
    assert f"release_check: {version()} of team/gpuci may be released" in result.stdout
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    section = changelog.split(f"\n## {version()}\n", 1)[1].split("\n## ", 1)[0]
    assert notes.read_text(encoding="utf-8") == section.strip() + "\n"


def test_the_release_check_refuses_what_would_install_something_else(tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    result = release_check(f"v{version()}", "fork/gpuci", "--notes", str(notes))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"release_check: tag 'v{version()}': the CI/CD Catalog takes X.Y.Z (no v prefix)",
        f"release_check: gpuci/__init__.py's __version__ is {version()}, the tag v{version()}",
        f"release_check: templates/gpuci.yml's GPUCI_VERSION is {version()}, the tag v{version()}",
        "release_check: templates/gpuci.yml's gpuci-project default is team/gpuci, but"
        " fork/gpuci releases it: its jobs would install another project's wheel; set it to"
        " this project's path",
        f"release_check: CHANGELOG.md has no '## v{version()}' section",
    ]
    assert not notes.exists()


@pytest.mark.slow
def test_the_wheel_holds_what_the_component_runs(tmp_path: Path) -> None:
    try:
        import hatchling  # noqa: F401
    except ImportError:
        missing("hatchling", "it builds the wheel the component installs")
    wheel = build_wheel(tmp_path)
    assert wheel.name == f"gpuci_isolation-{version()}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "gpuci/gitlab/verdict.sh" in names  # the verdict job runs it from the package
    templates = {
        p.relative_to(ROOT).as_posix() for p in (ROOT / "gpuci" / "report" / "templates").iterdir()
    }
    assert templates and templates <= names  # the report's and the comment's markup
    meta = zipfile.ZipFile(wheel).read(f"gpuci_isolation-{version()}.dist-info/METADATA")
    assert f"Name: {DIST}\nVersion: {version()}\n".encode() in meta
    assert any(n.endswith("licenses/LICENSE") for n in names)


# --- the component's inputs, as GitLab validates them -------------------------------------

GOOD = {
    "job-prefix": ["gpuci", "gpuci-fp16", "gpu.ci_2"],
    "gpuci-project": ["team/gpuci", "group/sub.group/gpuci-mirror"],
    "paths": ["tests", "tests/gpu tests/test_x.py::test_a[fp16]", "-m gpu tests"],
    "pytest-args": ["", "-k 'not slow'", "-x --maxfail=2 -p no:cacheprovider"],
    "image": ["nvidia/cuda:12.6.3-devel-ubuntu22.04", "registry.example.com:5000/a/b@sha256:ab"],
    "stage": ["test", "gpu tests"],
    "modes": ["", "suite", "suite,parallel,threads,isolated"],
    "workers": ["auto", "1", "16"],
    "evidence-budget": ["", "600", "90.5"],
    "test-timeout": ["", "120"],
    "timeout": ["1h", "90m", "2h 30m", "3600", "1 hour"],
    "out": ["out/gpuci", "results", "out/gpu-2"],
    "pip-index-url": [
        "",
        "https://pypi.mirror.example/simple",
        "http://devpi.internal:3141/root/pypi/+simple/",
        "https://user:pw@nexus.example/repository/pypi/simple",
    ],
}
BAD = {
    "job-prefix": ["", "gpu ci", "-gpuci", "gpuci:x"],
    "gpuci-project": ["", "gpuci", "https://gitlab.com/team/gpuci", "team/gpuci; id"],
    "paths": ["", "tests; rm -rf /", "tests && id", "$(id)", "`id`", "tests | tee", "a\nb"],
    "pytest-args": ["-k x; id", "$HOME", "> out"],
    "image": ["a b", "x;id"],
    "stage": ["", "test; id"],
    "modes": ["lots", "suite,", "suite;parallel"],
    "workers": ["lots", "0", "-1", "auto,2", "4 "],
    "evidence-budget": ["lots", "1e9", "-5"],
    "test-timeout": ["forever", "-1"],
    "timeout": ["forever", "1h;id"],
    "out": ["/etc", "../up", "out gpuci", ""],
    "pip-index-url": [
        "pypi.org/simple",
        "ftp://mirror/simple",
        "https://m/simple; id",
        "https://a b",
    ],
}


def test_every_free_form_input_has_a_regex_its_default_matches() -> None:
    inputs = spec_inputs()
    free = {
        name
        for name, spec in inputs.items()
        if "options" not in spec and spec.get("type", "string") == "string"
    }
    assert free - COMMANDS == set(GOOD) == set(BAD)
    for name in free - COMMANDS:
        assert re.fullmatch(inputs[name]["regex"], str(inputs[name]["default"])), name
    assert all("regex" not in inputs[name] for name in COMMANDS)


@pytest.mark.parametrize("name", sorted(GOOD))
def test_an_input_regex_takes_good_values_and_refuses_bad_ones(name: str) -> None:
    # GitLab anchors nothing for us: each pattern is ^...$ itself, and RE2 and `re` agree on it.
    pattern = spec_inputs()[name]["regex"]
    assert pattern.startswith("^") and pattern.endswith("$")
    assert [v for v in GOOD[name] if not re.fullmatch(pattern, v)] == []
    assert [v for v in BAD[name] if re.fullmatch(pattern, v)] == []


def test_workers_lots_fails_pipeline_creation() -> None:
    # The example: GitLab refuses `workers: lots` before any job starts.
    assert re.fullmatch(spec_inputs()["workers"]["regex"], "lots") is None
