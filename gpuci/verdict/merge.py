"""Merge JUnit XML files of files, shards and modes into one, for GitLab's test report.

`gpuci merge INPUTS... -o OUT.xml`. An input is a JUnit file, or a directory that is
searched for them: a whole result directory (``OUT/`` with mode folders and shards), one
mode's folder, one shard's folder, or any folder of JUnit files.

Which files a directory contributes, so that no test is counted twice:

- A directory that holds ``junit.xml`` is a result directory (a mode's or a shard's):
  its ``junit.xml`` already holds everything its per-interpreter ``junit/`` folder and
  its ``shard-I-of-N/`` folders hold, so those two are skipped and ``junit.xml`` stands
  for them. Its other ``*.xml`` files and other folders are inputs as usual.
- A directory without ``junit.xml`` (a mode that was killed before it merged, or a mode
  that ran sharded) contributes every ``*.xml`` below it, ``junit/`` included: the
  per-interpreter files are then the only record.
- Hidden files (a ``.name.xxxx`` temporary of an atomic write still in progress) and
  symlinked folders are skipped; the output file itself is never an input, so
  ``gpuci merge OUT -o OUT/junit.xml`` can be run again.

Each input file keeps its own ``<testsuite>`` elements, renamed after where the file came
from, because junitparser merges suites that compare equal, and pytest calls every suite
``pytest``. When the inputs span more than one mode, every test case's name gets the
prefix ``[mode] ``: GitLab keeps only the first of several test cases with one name.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from junitparser import JUnitXml, JUnitXmlError
from junitparser import junitparser as _junitparser

from gpuci.model import InputError, Mode, UsageError

JUNIT_NAME = "junit.xml"  # a result directory's merged file
PER_FILE_DIR = "junit"  # a result directory's per-interpreter files
SHARD_DIR = re.compile(r"shard-\d+-of-\d+")
# pytest names every suite "pytest" (its junit_suite_name default): such a name says
# nothing, so the file's label replaces it instead of being put in front of it.
GENERIC_SUITE_NAMES = frozenset({"", "pytest"})
MODE_NAMES = frozenset(m.value for m in Mode)
MODE_PREFIX = re.compile(rf"\[(?:{'|'.join(m.value for m in Mode)})\] ")
# The ElementTree implementation junitparser builds its elements with: lxml's when that is
# installed, else the standard library's; parsing and writing must use the same one.
ETREE: Any = vars(_junitparser)["etree"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeSummary:
    """What one merge wrote: the counts are those of the output file."""

    files: int
    suites: int
    tests: int
    failures: int
    errors: int
    skipped: int
    modes: tuple[Mode, ...] = ()

    def __str__(self) -> str:
        modes = f" of {', '.join(m.value for m in self.modes)}" if self.modes else ""
        return (
            f"{self.tests} tests ({self.failures} failures, {self.errors} errors,"
            f" {self.skipped} skipped) from {self.files} files{modes}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class JUnitInput:
    """One JUnit file to merge, with the suite label and the mode it stands for."""

    path: Path
    label: str  # where it came from, e.g. "parallel/shard-2-of-3"; names its suites
    mode: Mode | None  # the nearest parent directory that is a mode, if any


def merge_junit(inputs: Sequence[Path], output: Path) -> MergeSummary:
    """Merge the JUnit files found in `inputs` into `output`, written atomically."""
    found = find_junit_inputs(inputs, exclude=output)
    modes = tuple(sorted({f.mode for f in found if f.mode is not None}, key=_mode_order))
    prefix_modes = len(modes) > 1

    merged: Any = JUnitXml()  # junitparser's methods carry no type hints
    root = merged._elem
    used_names: set[str] = set()
    suites = 0
    for item in found:
        for suite in _read_suites(item.path):
            base = _suite_name(item.label, suite.get("name") or "")
            name = _unique(base, used_names)
            suite.set("name", name)
            if prefix_modes and item.mode is not None:
                _prefix_cases(suite, f"[{item.mode.value}] ")
            # Appending the element directly, not through JUnitXml.add_testsuite: that
            # compares the new suite with every earlier one (quadratic in the number of
            # files), and our names are unique, so it would never merge anything.
            root.append(suite)
            suites += 1
    # Counts are recomputed once, here: the inputs' own counts may be stale or absent
    # (a file rebuilt from the journal), and per-suite updates while adding are quadratic.
    merged.update_statistics()
    _write_atomic(merged, output)
    return MergeSummary(
        files=len(found),
        suites=suites,
        tests=int(merged.tests or 0),
        failures=int(merged.failures or 0),
        errors=int(merged.errors or 0),
        skipped=int(merged.skipped or 0),
        modes=modes,
    )


def find_junit_inputs(inputs: Sequence[Path], *, exclude: Path | None = None) -> list[JUnitInput]:
    """The JUnit files that `inputs` name or hold, each once, in a stable order."""
    if not inputs:
        raise UsageError("no inputs given: name JUnit files or result directories to merge")
    skip = {exclude.resolve()} if exclude is not None else set()
    found: list[JUnitInput] = []
    for given in inputs:
        if given.is_dir():
            for path in _walk(given):
                rel = path.relative_to(given)
                _add(found, skip, path, _label(rel, fallback=given.name or str(given)))
        elif given.is_file():
            _add(found, skip, given, _label(given, fallback=given.stem))
        else:
            raise InputError(f"{given}: no such file or directory (nothing to merge there)")
    if not found:
        names = ", ".join(str(p) for p in inputs)
        raise UsageError(
            f"no JUnit XML files found in {names}: give *.xml files or result directories"
        )
    return found


def _add(found: list[JUnitInput], seen: set[Path], path: Path, label: str) -> None:
    resolved = path.resolve()
    if resolved in seen:  # named twice, or the output itself
        return
    seen.add(resolved)
    found.append(JUnitInput(path=path, label=label, mode=_mode_of(path)))


def _walk(directory: Path) -> Iterator[Path]:
    """Every JUnit file under `directory` that is not already inside a `junit.xml`."""
    try:
        entries = sorted(directory.iterdir(), key=lambda p: _natural_key(p.name))
    except OSError as exc:
        raise InputError(f"{directory}: cannot list ({exc.strerror})") from None
    merged_here = (directory / JUNIT_NAME).is_file()
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            if entry.is_symlink():
                continue  # a link back up would make the walk endless
            if merged_here and (entry.name == PER_FILE_DIR or SHARD_DIR.fullmatch(entry.name)):
                continue
            yield from _walk(entry)
        elif entry.suffix == ".xml" and entry.is_file():
            yield entry


def _natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    # shard-10-of-12 sorts after shard-9-of-12, not after shard-1-of-12.
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name)
    )


def _label(rel: Path, *, fallback: str) -> str:
    """A file's label: its result directory for `junit.xml`, else its path less `.xml`."""
    if rel.name == JUNIT_NAME:
        parent = rel.parent.as_posix()
        return fallback if parent == "." else parent
    return rel.with_suffix("").as_posix()


def _mode_of(path: Path) -> Mode | None:
    for parent in path.absolute().parents:
        if parent.name in MODE_NAMES:
            return Mode(parent.name)
    return None


def _mode_order(mode: Mode) -> int:
    return list(Mode).index(mode)


def _suite_name(label: str, original: str) -> str:
    return label if original in GENERIC_SUITE_NAMES else f"{label}: {original}"


def _unique(name: str, used: set[str]) -> str:
    candidate, n = name, 1
    while candidate in used:
        n += 1
        candidate = f"{name} ({n})"
    used.add(candidate)
    return candidate


def _prefix_cases(suite: Any, prefix: str) -> None:
    for case in suite.iter("testcase"):
        name = case.get("name") or ""
        # A file merged before already carries a prefix; a second one would only clutter.
        if not MODE_PREFIX.match(name):
            case.set("name", prefix + name)


def _read_suites(path: Path) -> list[Any]:
    """The top-level `<testsuite>` elements of one JUnit file."""
    try:
        xml = JUnitXml.fromfile(str(path), parse_func=_parse)
    except SyntaxError as exc:  # ElementTree.ParseError and lxml's errors derive from it
        raise InputError(
            f"{path}: not well-formed XML ({exc}); the file is truncated or corrupt,"
            " rerun the job that wrote it or leave it out"
        ) from None
    except JUnitXmlError:
        raise InputError(
            f"{path}: not a JUnit XML file (its root is neither <testsuites> nor <testsuite>);"
            " leave it out of the inputs"
        ) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    return list(xml._elem.iterfind("testsuite"))


def _parse(source: str) -> Any:
    etree = ETREE
    if etree.__name__.startswith("lxml"):
        # lxml would expand entities that name local files: a test's output must not be
        # able to pull /etc/passwd into an uploaded artifact.
        parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True)
        return etree.parse(source, parser)
    return etree.parse(source)


def _write_atomic(xml: Any, output: Path) -> None:
    """Write `xml` to `output` so that a reader never sees half a file."""
    if output.is_dir():
        raise UsageError(f"{output}: is a directory; give -o a file name such as junit.xml")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent)
    except OSError as exc:
        raise InputError(f"{output}: cannot write ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            ETREE.ElementTree(xml._elem).write(f, encoding="utf-8", xml_declaration=True)
        # mkstemp makes the file private; a report is for everyone who can read the folder.
        Path(tmp).chmod(0o644)
        Path(tmp).replace(output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
