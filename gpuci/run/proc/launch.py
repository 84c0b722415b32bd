"""Launch and Attempt: what one interpreter is asked to run, and what it did."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci.model import SUITE_UNIT, FileStatus, Interpreter, TestResult, whole_suite_unit
from gpuci.processes import Leftover, Stranger
from gpuci.run.disk.outdir import CACHES, STATE_DIR
from gpuci.run.disk.side_outputs import interpreter_args
from gpuci.run.proc.plugin_env import JUNIT_ENV, PLAIN_ENV, with_plugin

SUITE_STEM = "suite"  # its journal, log and JUnit file names


def unit_stem(key: str) -> str:
    """The name of a unit's journal, log and JUnit files: its file, or the whole suite's
    mode (`suite`, `reversed`, `shuffled`)."""
    return key.strip("()") if whole_suite_unit(key) else key


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """One interpreter to start: which tests, from which paths, on which GPUs."""

    key: str  # the scheduled unit: a file, or SUITE_UNIT; names its journal and log
    # the tests to run, handed over in GPUCI_ONLY; None: what pytest collects from the
    # targets (a screen runs files with the user's arguments, as plain pytest would)
    ids: tuple[str, ...] | None
    targets: tuple[str, ...]  # the paths handed to pytest
    slot: int
    gpu: str | None  # CUDA_VISIBLE_DEVICES, None: leave it alone
    attempt: int
    junit: Path | None
    label: str
    env: Mapping[str, str] = field(default_factory=dict)  # on top of the interpreters' own
    wrapper: tuple[str, ...] = ()  # a command the interpreter runs under (compute-sanitizer)
    timeout: float | None = None  # instead of the interpreters' --timeout (a slow wrapper)
    lane: int = 0  # an evidence run beside another of the same file: its own journal and log
    held: bool = False  # the suite interpreter started before discovery may be taken for it
    rendezvous: str | None = None  # a pair's: "FOLDER:N", handed over with its ids
    # its private pytest cache's name where not its stem: an interpreter held ahead owns
    # one, as the run that takes it may have any lane
    cache: str = ""

    @property
    def stem(self) -> str:
        """The name of its journal, log and JUnit files."""
        stem = unit_stem(self.key)
        return f"{stem}.{self.lane}" if self.lane else stem


@dataclass(slots=True)
class Attempt:
    """What one interpreter did, read back from its journal and exit status."""

    interpreter: Interpreter
    results: list[TestResult] = field(default_factory=list)
    resume: list[str] = field(default_factory=list)  # ids to run in a fresh interpreter
    status: FileStatus = FileStatus.PASSED
    junit_part: Path | None = None
    finished: list[dict[str, Any]] = field(default_factory=list)
    leftovers: list[Leftover] = field(default_factory=list)  # what it left running, ended
    strangers: list[Stranger] = field(default_factory=list)  # new GPU memory holders after it


def pytest_command(
    python: str, pytest_args: Sequence[str], launch: Launch, *, out: Path
) -> list[str]:
    """The command line of one interpreter. The suite interpreter's is the user's plain
    `python -m pytest ARGS PATHS`, nothing added (gpuci's plugin and its files come through
    the environment: `launch_environ`). Any other gets the user's arguments too, with what
    must not be shared redirected to its own (`interpreter_args`: its cache under `out`,
    no JUnit of the user's), its JUnit file, and a file that cannot be collected as that
    file's result (--continue-on-collection-errors), not an interrupt of the session."""
    if launch.key == SUITE_UNIT:  # the plain pytest run
        return [*launch.wrapper, python, "-m", "pytest", *pytest_args, *launch.targets]
    cmd = [python, "-m", "pytest", "--continue-on-collection-errors"]
    if launch.junit is not None:
        cmd += ["-o", f"junit_suite_name={launch.key}", f"--junitxml={launch.junit}"]
    args = interpreter_args(
        python, pytest_args, cache=private_cache(out, launch.cache or launch.stem)
    )
    return [*launch.wrapper, *cmd, *args, *launch.targets]


def private_cache(out: Path, stem: str) -> Path:
    """The pytest cache directory of a unit's interpreters (not the suite's, which reads and
    writes the user's): `request.config.cache` works there, and writes nobody else's. It
    lies in OUT's state folder, not in the mode's: an interpreter started ahead for a mode
    that then never ran must not leave that mode's folder behind (a mode folder says the
    mode ran, and is read as its results). Absolute and without `..`: pytest refuses every
    key of a cache directory whose path climbs (`--out ../out`: each interpreter ended
    with INTERNALERROR, its tests read as failed)."""
    return (out.parent / STATE_DIR / CACHES / out.name / stem).resolve()


def without_private_cache(command: Sequence[str]) -> list[str]:
    """`command` with its private cache (`private_cache`, and the --basetemp beside it) named
    alike for every interpreter: two commands that differ only there run the same tests the
    same way, each writing its own."""
    marker = f"/{STATE_DIR}/{CACHES}/"
    return [
        "<its own>" if arg.startswith(("cache_dir=", "--basetemp=")) and marker in arg else arg
        for arg in command
    ]


def launch_environ(
    environ: Mapping[str, str], launch: Launch, *, journal: Path, only: Path
) -> dict[str, str]:
    """The environment of one interpreter: gpuci's plugin (PYTEST_PLUGINS), its journal,
    its tests, its slot and GPUs; the suite interpreter's JUnit file for gpuci."""
    env = dict(
        with_plugin(environ),
        GPUCI_JOURNAL=str(journal),
        GPUCI_ONLY=str(only),
        GPUCI_SLOT=str(launch.slot),
        **launch.env,
    )
    if launch.key == SUITE_UNIT:  # the plain pytest run: the plugin only watches there
        env[PLAIN_ENV] = "1"
        if launch.junit is not None:
            env[JUNIT_ENV] = str(launch.junit)
    if launch.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = launch.gpu
    return env


def junit_part(out: Path, stem: str, attempt: int) -> Path:
    """Where one interpreter of a unit writes its JUnit XML (merged at the unit's end)."""
    return out / "junit" / f"{stem}.part{attempt}.xml"
