"""gpuci's release as the component's default install takes it, built from this checkout:
the wheel its tag pipeline builds, and a fresh Python for a job to install it into, which
finds gpuci's dependencies already installed (links to this interpreter's) and no index,
so a job's pip can install that wheel and nothing else.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # gpuci's own dependency before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
DIST = "gpuci-isolation"  # pyproject's name: PyPI's `gpuci` is another project


def version() -> str:
    """gpuci/__init__.py's __version__, read as hatchling reads it."""
    text = (ROOT / "gpuci" / "__init__.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    assert found, "gpuci/__init__.py: no __version__"
    return found[1]


def build_wheel(dest: Path) -> Path:
    """This checkout's wheel, built as the tag pipeline builds it (hatchling), in `dest`."""
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
    command += ["--no-build-isolation", "--no-index", "--wheel-dir", str(dest), str(ROOT)]
    subprocess.run(
        command,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = dest.glob("*.whl")
    return wheel


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [Requirement(r) for r in project["dependencies"]]


def dependencies_view(dest: Path, without: Sequence[str] = ()) -> Path:
    """Links in `dest` to the installed distributions gpuci depends on, and theirs, and pip
    (never gpuci itself, nor those named `without`), for a fresh Python's sys.path: its pip
    sees them installed."""
    dest.mkdir()
    # pip too: the job's `python3 -m pip` (a venv without ensurepip, which Debian splits off)
    todo, seen = [*_requirements(), Requirement("pip")], {name.lower() for name in without}
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            dist = distribution(requirement.name)
        except PackageNotFoundError:
            continue  # a marker-less optional one (tomli on 3.11): nothing to link
        name = dist.metadata["Name"].lower()
        if name in seen:
            continue
        seen.add(name)
        todo += [Requirement(r) for r in dist.requires or []]
        for file in dist.files or []:
            top = file.parts[0]
            link = dest / top
            if top in {"..", "__pycache__"} or top.endswith(".pth") or link.exists():
                continue
            link.symlink_to(Path(str(dist.locate_file(top))))
    return dest


def wheel_of_installed(name: str, dest: Path) -> Path:
    """The installed distribution `name` packed again as a wheel in `dest` (its files and
    its dist-info, RECORD as installed): what a package index would serve for it."""
    dist = distribution(name)
    tag = "py3-none-any"
    wheel = dest / f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for file in dist.files or []:
            if file.parts[0] in {"..", "__pycache__"} or "__pycache__" in file.parts:
                continue
            source = Path(str(dist.locate_file(file)))
            if source.is_file():
                archive.write(source, str(file))
    return wheel


def job_python(tmp_path: Path, without: Sequence[str] = ()) -> Path:
    """A virtual environment whose `python3` a job runs: pip and gpuci's dependencies
    (linked) but those named `without`, no gpuci. Its bin/ goes first on the job's PATH."""
    venv = tmp_path / "job-venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300
    )
    (site,) = venv.glob("lib/python*/site-packages")
    view = dependencies_view(tmp_path / "job-deps", without)
    (site / "gpuci-dependencies.pth").write_text(f"{view}\n", encoding="utf-8")
    return venv / "bin"
