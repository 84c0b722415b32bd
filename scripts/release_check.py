"""Check that a tag may be released, and write its release notes: the tag pipeline's first step.

A release is one version in four places that must agree: the git tag, `gpuci/__init__.py`'s
`__version__` (the package's one version source, which hatchling reads), the component's
`GPUCI_VERSION` (the wheel its jobs install) and a `## X.Y.Z` section of CHANGELOG.md. The
component's `gpuci-project` default must name the project that releases it, or its jobs
would install from another project.

    python scripts/release_check.py TAG PROJECT_PATH [--notes FILE]

Exit 0 and the section of CHANGELOG.md in FILE when all agree; else exit 1, one line each.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEMVER = re.compile(r"\d+\.\d+\.\d+")  # the CI/CD Catalog takes X.Y.Z tags only


def package_version(root: Path = ROOT) -> str:
    """`__version__` in gpuci/__init__.py, read as hatchling reads it (not imported)."""
    text = (root / "gpuci" / "__init__.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    if found is None:
        raise SystemExit("gpuci/__init__.py: no __version__ line")
    return found[1]


def component_default(name: str, root: Path = ROOT) -> str:
    """The component's value for `name`: a job variable (GPUCI_VERSION) or an input's default."""
    text = (root / "templates" / "gpuci.yml").read_text(encoding="utf-8")
    if name.isupper():
        found = re.search(rf'^\s+{name}: "([^"]*)"', text, re.MULTILINE)
    else:
        spec = rf"^    {re.escape(name)}:\n(?:      .*\n)*?      default: (\S+)"
        found = re.search(spec, text, re.MULTILINE)
    if found is None:
        raise SystemExit(f"templates/gpuci.yml: no {name}")
    return found[1]


def changelog_section(version: str, root: Path = ROOT) -> str | None:
    """CHANGELOG.md's `## version` section, without its heading; None where it has none."""
    text = (root / "CHANGELOG.md").read_text(encoding="utf-8")
    found = re.search(rf"^## {re.escape(version)}\s*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return found[1].strip() + "\n" if found else None


def problems(tag: str, project: str, root: Path = ROOT) -> list[str]:
    """What keeps `tag` of `project` from being released: one line each."""
    found = []
    if not SEMVER.fullmatch(tag):
        found.append(f"tag {tag!r}: the CI/CD Catalog takes X.Y.Z (no v prefix)")
    version = package_version(root)
    if version != tag:
        found.append(f"gpuci/__init__.py's __version__ is {version}, the tag {tag}")
    installs = component_default("GPUCI_VERSION", root)
    if installs != tag:
        found.append(f"templates/gpuci.yml's GPUCI_VERSION is {installs}, the tag {tag}")
    source = component_default("gpuci-project", root)
    if source != project:
        found.append(
            f"templates/gpuci.yml's gpuci-project default is {source}, but {project} releases"
            " it: its jobs would install another project's wheel; set it to this project's path"
        )
    if changelog_section(tag, root) is None:
        found.append(f"CHANGELOG.md has no '## {tag}' section")
    return found


def main(argv: list[str] | None = None) -> int:
    """Check the tag; write its release notes where all agree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tag")
    parser.add_argument("project", help="the releasing project's path (CI_PROJECT_PATH)")
    parser.add_argument("--notes", type=Path, help="where to write the CHANGELOG section")
    args = parser.parse_args(argv)
    found = problems(args.tag, args.project)
    for line in found:
        print(f"release_check: {line}", file=sys.stderr)
    if found:
        return 1
    if args.notes is not None:
        args.notes.write_text(changelog_section(args.tag) or "", encoding="utf-8")
    print(f"release_check: {args.tag} of {args.project} may be released")
    return 0


if __name__ == "__main__":
    sys.exit(main())
