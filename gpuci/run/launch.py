"""Launch and Attempt: what one interpreter is asked to run, and what it did."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci.model import (
    SUITE_UNIT,
    FileStatus,
    Interpreter,
    Leftover,
    Stranger,
    TestResult,
)

SUITE_STEM = "suite"  # its journal, log and JUnit file names


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """One interpreter to start: which tests, from which paths, on which GPUs."""

    key: str  # the scheduled unit: a file, or SUITE_UNIT; names its journal and log
    ids: tuple[str, ...]  # the tests to run, handed over in GPUCI_ONLY
    targets: tuple[str, ...]  # the paths handed to pytest
    slot: int
    gpu: str | None  # CUDA_VISIBLE_DEVICES, None: leave it alone
    attempt: int
    junit: Path | None
    label: str
    env: Mapping[str, str] = field(default_factory=dict)  # on top of the interpreters' own
    wrapper: tuple[str, ...] = ()  # a command the interpreter runs under (compute-sanitizer)
    timeout: float | None = None  # instead of the interpreters' --timeout (a slow wrapper)
    fresh: bool = False  # never forked: a run whose outcome a printed command stands for
    lane: int = 0  # an evidence run beside another of the same file: its own journal and log

    @property
    def stem(self) -> str:
        """The name of its journal, log and JUnit files."""
        stem = SUITE_STEM if self.key == SUITE_UNIT else self.key
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
    unforked: str = ""  # why a forked child stopped before its tests: run it fresh
