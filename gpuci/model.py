"""The shared model: modes, outcomes, categories, results, and their files on disk.

Every stage imports this module and none other of gpuci's (but the stages before it).
`run.json` (schema ``gpuci.run/1``) and `verdict.json` (schema ``gpuci.verdict/1``) are
written and read here, so their shape lives in one place.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

RUN_SCHEMA = "gpuci.run/1"
VERDICT_SCHEMA = "gpuci.verdict/1"


class GpuciError(Exception):
    """A problem gpuci reports as one line, then exits with `exit_code`."""

    exit_code = 3


class UsageError(GpuciError):
    """The command line asked for something impossible (exit code 2)."""

    exit_code = 2


class InputError(GpuciError):
    """A file gpuci must read is missing, unreadable or malformed (exit code 3)."""

    exit_code = 3


class Mode(str, Enum):
    """How the interpreters of a run are laid out."""

    ISOLATED = "isolated"
    PARALLEL = "parallel"
    SUITE = "suite"


class Outcome(str, Enum):
    """What happened to one test in one run."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    CRASHED = "crashed"
    TIMED_OUT = "timed-out"
    NOT_RUN = "not-run"


class Category(str, Enum):
    """The diff's verdict on one test across modes and alone-reruns."""

    PASSED = "passed"
    SKIPPED = "skipped"
    FAILED = "failed"
    FLAKY = "flaky"
    ORDER_DEPENDENT = "order-dependent"
    DEPENDS_ON_OTHERS = "depends-on-others"
    CONCURRENCY = "concurrency"
    CRASHED = "crashed"
    TIMED_OUT = "timed-out"
    NOT_RUN = "not-run"


NOT_PASSING = frozenset({Outcome.FAILED, Outcome.CRASHED, Outcome.TIMED_OUT})
SUITE_UNIT = "(suite)"  # the one scheduled unit of suite mode, in place of a test file

# Escape sequences (CSI, OSC, two-character) and other control characters, including
# the bidirectional overrides that reorder what a terminal shows.
_ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-_])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """Untrusted text (test ids, messages) for a terminal: escapes removed, controls as `?`."""
    return _CONTROL.sub("?", _ANSI_ESCAPE.sub("", text))


ISOLATION_CATEGORIES = frozenset(
    {Category.ORDER_DEPENDENT, Category.DEPENDS_ON_OTHERS, Category.CONCURRENCY}
)


class FileStatus(str, Enum):
    """How the interpreters that ran one test file ended, worst first."""

    CRASHED = "crashed"  # an interpreter died (signal, abort, os._exit) while tests remained
    TIMED_OUT = "timed-out"  # gpuci killed an interpreter that overran --timeout
    COLLECTION_ERROR = "collection-error"  # pytest could not import or collect the file
    FAILED = "failed"  # every test ran; some did not pass
    PASSED = "passed"  # every test ran and none failed
    NOT_RUN = "not-run"  # gpuci stopped (Ctrl-C) before the file ran


@dataclass(frozen=True, slots=True, kw_only=True)
class TestResult:
    """One test's outcome in one mode, with its alone-reruns."""

    __test__ = False  # not a pytest test class, despite the name

    id: str
    file: str
    outcome: Outcome
    duration: float = 0.0
    message: str = ""
    reruns: tuple[Outcome, ...] = ()
    log: str = ""  # the interpreter's log tail, kept for crashes and timeouts


@dataclass(frozen=True, slots=True, kw_only=True)
class Interpreter:
    """One `python -m pytest` process that ran (part of) a file."""

    exit_code: int | None  # None when it died by a signal
    signal: int | None = None
    start: float  # seconds since the mode started
    end: float
    log: str  # path of its log, relative to the mode directory


@dataclass(frozen=True, slots=True, kw_only=True)
class FileRun:
    """How one test file (in `suite` mode: the whole suite) ran in one mode."""

    file: str
    status: FileStatus
    slot: int
    gpu: str | None  # the CUDA_VISIBLE_DEVICES it ran with, None when gpuci set none
    start: float  # seconds since the mode started
    end: float
    interpreters: tuple[Interpreter, ...] = ()
    tests: int = 0

    @property
    def duration(self) -> float:
        """Wall time from the first interpreter's start to the last one's end."""
        return self.end - self.start


@dataclass(frozen=True, slots=True, kw_only=True)
class ModeRun:
    """Everything one mode (or one shard of it) did: the content of `run.json`."""

    mode: Mode
    command: tuple[str, ...]
    pytest_args: tuple[str, ...] = ()
    rootdir: str
    workers: int
    gpus: tuple[str, ...] = ()
    shard: tuple[int, int] | None = None  # (index, total), 1-based
    timeout: float | None = None
    reruns: int = 2
    wall_s: float = 0.0
    started_at: str = ""  # ISO 8601, UTC
    interrupted: bool = False
    environment: dict[str, str] = field(default_factory=dict)
    files: tuple[FileRun, ...] = ()
    tests: tuple[TestResult, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TestVerdict:
    """One test's category, with the evidence that decided it."""

    __test__ = False

    id: str
    file: str
    category: Category
    outcomes: dict[str, str]  # mode -> Outcome value
    reruns: tuple[str, ...] = ()  # Outcome values of the alone-reruns, all modes
    new: bool | None = None  # isolation regressions only, when a baseline was given
    message: str = ""
    log: str = ""
    reproduce: str = ""  # a ready-to-paste shell command that reproduces the finding


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The diff's answer for a whole run: `verdict.json`."""

    verdict: str  # "pass", "warn" or "fail"
    reasons: tuple[str, ...] = ()
    summary: dict[str, int] = field(default_factory=dict)
    modes: dict[str, dict[str, Any]] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    tests: tuple[TestVerdict, ...] = ()


# --- files on disk -------------------------------------------------------------------


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader never sees half a file, even if we are killed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, ensure_ascii=False)
            f.write("\n")
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path, schema: str) -> dict[str, Any]:
    """Read a gpuci JSON file, checking that it is one of ours and of this version."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not readable as JSON ({exc})") from None
    found = data.get("schema") if isinstance(data, dict) else None
    if found != schema:
        raise InputError(
            f"{path}: schema is {found!r}, expected {schema!r}"
            " (written by another gpuci version, or not a gpuci file)"
        )
    return data  # type: ignore[no-any-return]


def mode_run_to_json(run: ModeRun) -> dict[str, Any]:
    """The `run.json` form of a mode's run."""
    return {
        "schema": RUN_SCHEMA,
        "mode": run.mode.value,
        "command": list(run.command),
        "pytest_args": list(run.pytest_args),
        "rootdir": run.rootdir,
        "workers": run.workers,
        "gpus": list(run.gpus),
        "shard": list(run.shard) if run.shard else None,
        "timeout": run.timeout,
        "reruns": run.reruns,
        "wall_s": round(run.wall_s, 3),
        "started_at": run.started_at,
        "interrupted": run.interrupted,
        "environment": run.environment,
        "files": [
            {
                "file": f.file,
                "status": f.status.value,
                "slot": f.slot,
                "gpu": f.gpu,
                "start": round(f.start, 3),
                "end": round(f.end, 3),
                "duration": round(f.duration, 3),
                "tests": f.tests,
                "interpreters": [
                    {
                        "exit_code": i.exit_code,
                        "signal": i.signal,
                        "start": round(i.start, 3),
                        "end": round(i.end, 3),
                        "log": i.log,
                    }
                    for i in f.interpreters
                ],
            }
            for f in run.files
        ],
        "tests": [
            {
                "id": t.id,
                "file": t.file,
                "outcome": t.outcome.value,
                "duration": round(t.duration, 4),
                "message": t.message,
                "reruns": [r.value for r in t.reruns],
                **({"log": t.log} if t.log else {}),
            }
            for t in run.tests
        ],
    }


def mode_run_from_json(data: dict[str, Any], source: Path) -> ModeRun:
    """Parse `run.json` content; a missing or mistyped field is an InputError naming `source`."""
    try:
        shard = data.get("shard")
        return ModeRun(
            mode=Mode(data["mode"]),
            command=tuple(data["command"]),
            pytest_args=tuple(data.get("pytest_args", ())),
            rootdir=data["rootdir"],
            workers=int(data["workers"]),
            gpus=tuple(data.get("gpus", ())),
            shard=(int(shard[0]), int(shard[1])) if shard else None,
            timeout=data.get("timeout"),
            reruns=int(data.get("reruns", 0)),
            wall_s=float(data.get("wall_s", 0.0)),
            started_at=data.get("started_at", ""),
            interrupted=bool(data.get("interrupted", False)),
            environment=dict(data.get("environment", {})),
            files=tuple(
                FileRun(
                    file=f["file"],
                    status=FileStatus(f["status"]),
                    slot=int(f["slot"]),
                    gpu=f.get("gpu"),
                    start=float(f["start"]),
                    end=float(f["end"]),
                    tests=int(f.get("tests", 0)),
                    interpreters=tuple(
                        Interpreter(
                            exit_code=i.get("exit_code"),
                            signal=i.get("signal"),
                            start=float(i["start"]),
                            end=float(i["end"]),
                            log=i["log"],
                        )
                        for i in f.get("interpreters", ())
                    ),
                )
                for f in data["files"]
            ),
            tests=tuple(
                TestResult(
                    id=t["id"],
                    file=t["file"],
                    outcome=Outcome(t["outcome"]),
                    duration=float(t.get("duration", 0.0)),
                    message=t.get("message", ""),
                    reruns=tuple(Outcome(r) for r in t.get("reruns", ())),
                    log=t.get("log", ""),
                )
                for t in data["tests"]
            ),
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise InputError(f"{source}: malformed run.json ({type(exc).__name__}: {exc})") from None


def read_mode_run(path: Path) -> ModeRun:
    """Read one `run.json`."""
    return mode_run_from_json(read_json(path, RUN_SCHEMA), path)


def verdict_to_json(verdict: Verdict) -> dict[str, Any]:
    """The `verdict.json` form of a verdict."""
    return {
        "schema": VERDICT_SCHEMA,
        "verdict": verdict.verdict,
        "reasons": list(verdict.reasons),
        "summary": {c.value: verdict.summary.get(c.value, 0) for c in Category},
        "modes": verdict.modes,
        "environment": verdict.environment,
        "tests": [
            {
                "id": t.id,
                "file": t.file,
                "category": t.category.value,
                "outcomes": t.outcomes,
                "reruns": list(t.reruns),
                "new": t.new,
                "message": t.message,
                "reproduce": t.reproduce,
                **({"log": t.log} if t.log else {}),
            }
            for t in verdict.tests
        ],
    }


def verdict_from_json(data: dict[str, Any], source: Path) -> Verdict:
    """Parse `verdict.json` content; malformed content is an InputError naming `source`."""
    try:
        return Verdict(
            verdict=str(data["verdict"]),
            reasons=tuple(data.get("reasons", ())),
            summary={str(k): int(v) for k, v in data["summary"].items()},
            modes=dict(data.get("modes", {})),
            environment=dict(data.get("environment", {})),
            tests=tuple(
                TestVerdict(
                    id=t["id"],
                    file=t["file"],
                    category=Category(t["category"]),
                    outcomes=dict(t["outcomes"]),
                    reruns=tuple(t.get("reruns", ())),
                    new=t.get("new"),
                    message=t.get("message", ""),
                    log=t.get("log", ""),
                    reproduce=t.get("reproduce", ""),
                )
                for t in data["tests"]
            ),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(
            f"{source}: malformed verdict.json ({type(exc).__name__}: {exc})"
        ) from None


def read_verdict(path: Path) -> Verdict:
    """Read one `verdict.json`."""
    return verdict_from_json(read_json(path, VERDICT_SCHEMA), path)
