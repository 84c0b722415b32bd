"""The shared model: modes, outcomes, categories, results. Every stage imports it and none
other of gpuci's but the stages before it; `gpuci.formats` reads and writes their files."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from gpuci.processes import Leftover, Stranger
from gpuci.steps import Steps


class GpuciError(Exception):
    """A problem gpuci reports as one line, then exits with `exit_code`."""

    exit_code = 3


class UsageError(GpuciError):
    """The command line asked for something impossible (exit code 4, pytest's usage error)."""

    exit_code = 4


class InputError(GpuciError):
    """A file gpuci must read is missing, unreadable or malformed (exit code 3)."""

    exit_code = 3


class Mode(str, Enum):
    """How the interpreters of a run are laid out."""

    ISOLATED = "isolated"
    PARALLEL = "parallel"
    SUITE = "suite"
    THREADS = "threads"
    REVERSED = "reversed"  # one interpreter: the files in reverse collection order
    SHUFFLED = "shuffled"  # one interpreter: the files in a seeded shuffle of that order


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
    THREAD_UNSAFE = "thread-unsafe"
    CRASHED = "crashed"
    TIMED_OUT = "timed-out"
    NOT_RUN = "not-run"


NOT_PASSING = frozenset({Outcome.FAILED, Outcome.CRASHED, Outcome.TIMED_OUT})
SUITE_UNIT = "(suite)"  # the one scheduled unit of suite mode, in place of a test file
# The orders plain pytest did not run: one interpreter each, like the suite's, with the files
# in another order; what only they show is latent (the plain run passed it).
LATENT_ORDERS = (Mode.REVERSED, Mode.SHUFFLED)
WHOLE_SUITE_MODES = (Mode.SUITE, *LATENT_ORDERS)  # one interpreter runs every file
# each one's single scheduled unit, in place of a test file
WHOLE_SUITE_UNITS = {mode: f"({mode.value})" for mode in WHOLE_SUITE_MODES}


def whole_suite_unit(key: str) -> bool:
    """Whether a scheduled unit is a whole suite in one interpreter, not a test file."""
    return key in WHOLE_SUITE_UNITS.values()


def unit_of(mode: Mode) -> str | None:
    """The one unit of a mode that runs every file in one interpreter (None: files)."""
    return WHOLE_SUITE_UNITS.get(mode)


INTERRUPTED = "gpuci was interrupted"  # how a not-run test's message starts when gpuci stopped

# Escape sequences (CSI, OSC, two-character) and other control characters, including
# the bidirectional overrides that reorder what a terminal shows.
_ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-_])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """Untrusted text (test ids, messages) for a terminal: escapes removed, controls as `?`."""
    return _CONTROL.sub("?", _ANSI_ESCAPE.sub("", text))


# Categories only one mode can find: without it, a count of 0 would claim a check not made.
FOUND_ONLY_BY = {Category.CONCURRENCY: Mode.PARALLEL, Category.THREAD_UNSAFE: Mode.THREADS}

ISOLATION_CATEGORIES = frozenset(
    {
        Category.ORDER_DEPENDENT,
        Category.DEPENDS_ON_OTHERS,
        Category.CONCURRENCY,
        Category.THREAD_UNSAFE,
    }
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
    where: str = ""  # the failure's innermost frame in the suite's own code, `path:line`
    reruns: tuple[Outcome, ...] = ()
    log: str = ""  # the interpreter's log tail, kept for crashes and timeouts
    inferred: bool = False  # not run: concluded from another mode (a lazy isolated pass)
    cut: str = ""  # reruns the evidence budget left out
    counted: tuple[str, ...] = ()  # pytest's own words for it where not the outcome (xfailed)
    # not rerun: it failed alike with these, its group's representatives, which failed alone
    # the same way (`gpuci run`'s reruns of a storm)
    inferred_from: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Interpreter:
    """One `python -m pytest` process that ran (part of) a file."""

    exit_code: int | None  # None when it died by a signal
    signal: int | None = None
    start: float  # seconds since the mode started
    end: float
    log: str  # path of its log, relative to the mode directory
    gpu_peak_mib: int | None = None  # its most device memory at once; None: not measured
    gpus_held: int | None = None  # how many GPUs it held memory on; None: not measured
    startup_s: float | None = None  # from its start to its journal's first event (collection)
    ahead: bool = False  # started before its turn: startup_s is only what was not hidden

    def to_json(self) -> dict[str, Any]:
        """The run.json form (gpu_peak_mib, gpus_held and startup_s only where measured)."""
        return {
            "exit_code": self.exit_code,
            "signal": self.signal,
            "start": round(self.start, 3),
            "end": round(self.end, 3),
            "log": self.log,
            **({"gpu_peak_mib": self.gpu_peak_mib} if self.gpu_peak_mib is not None else {}),
            **({"gpus_held": self.gpus_held} if self.gpus_held is not None else {}),
            **({"startup_s": round(self.startup_s, 3)} if self.startup_s is not None else {}),
            **({"ahead": True} if self.ahead else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Interpreter:
        """Read the run.json form back."""
        return cls(
            exit_code=data.get("exit_code"),
            signal=data.get("signal"),
            start=float(data["start"]),
            end=float(data["end"]),
            log=data["log"],
            gpu_peak_mib=data.get("gpu_peak_mib"),
            gpus_held=data.get("gpus_held"),
            startup_s=float(data["startup_s"]) if data.get("startup_s") is not None else None,
            ahead=bool(data.get("ahead", False)),
        )


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
    inferred: bool = False  # not run: its outcomes were concluded from another mode
    leftovers: tuple[Leftover, ...] = ()  # processes its interpreters left running, ended
    strangers: tuple[Stranger, ...] = ()  # others found holding GPU memory after them

    @property
    def duration(self) -> float:
        """Wall time from the first interpreter's start to the last one's end."""
        return self.end - self.start


@dataclass(frozen=True, slots=True, kw_only=True)
class ModeRun:
    """Everything one mode (or one shard of it) did: the content of `run.json`."""

    mode: Mode
    command: tuple[str, ...]
    pytest_args: tuple[str, ...] = ()  # the user's, as every interpreter of the check got them
    threads: int | None = None  # threads mode: each test ran in N threads (--parallel-threads N)
    rootdir: str
    workdir: str = ""  # where gpuci ran (the project's root in CI): commands are relative to it
    workers: int
    gpus: tuple[str, ...] = ()
    gpus_per_slot: int | None = None  # None: every slot sees every GPU, rotated
    shard: tuple[int, int] | None = None  # (index, total), 1-based
    timeout: float | None = None
    reruns: int = 2
    wall_s: float = 0.0
    started_at: str = ""  # ISO 8601, UTC
    interrupted: bool = False
    environment: dict[str, str] = field(default_factory=dict)
    files: tuple[FileRun, ...] = ()
    tests: tuple[TestResult, ...] = ()
    paths: tuple[str, ...] = ()  # PATHS as given, absolute: what --resume must match
    resumed: bool = False  # it continued an interrupted run of this mode (--resume)
    gpu_check: str = ""  # how GPU memory holders were checked: "nvidia-smi", or why not
    poison: bool = False  # every interpreter filled fresh device allocations (--poison)
    # pytest-randomly's seed in the plain run, every other interpreter's (-p randomly
    # --randomly-seed=N): every command that reproduces a run carries it
    randomly_seed: int | None = None
    shuffle_seed: int | None = None  # the shuffled mode's: the seed its file order came from
    run_id: str = ""  # the check (or `gpuci run`) that made it: what --resume keeps
    # the effective settings: key -> {"value", "from"} (command line, [tool.gpuci], default);
    # "modes" adds "why": mode -> why it ran or did not
    settings: dict[str, Any] = field(default_factory=dict)
    beside: tuple[Mode, ...] = ()  # screens whose interpreters shared its pool at once (check)
    pace: dict[str, Any] = field(default_factory=dict)  # the suite's (gpuci.run.sched.pace)


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    """One run of a culprit search: the victim after (or beside) some others, and its outcome."""

    count: int  # tests that ran before the victim (files beside it, for concurrency)
    shown: tuple[str, ...]  # the nearest of them, at most PROBE_SHOWN
    outcome: Outcome  # the victim's
    kind: str = ""  # what the run tried where it is not the search's own step ("cascade")

    def to_json(self) -> dict[str, Any]:
        """The evidence.json and verdict.json form."""
        kind = {"kind": self.kind} if self.kind else {}
        return {
            "count": self.count,
            "shown": list(self.shown),
            "outcome": self.outcome.value,
            **kind,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Probe:
        """Read the JSON form back."""
        return cls(
            count=int(data["count"]),
            shown=tuple(str(x) for x in data.get("shown", ())),
            outcome=Outcome(data["outcome"]),
            kind=str(data.get("kind", "")),
        )


PROBE_SHOWN = 8  # ids a probe keeps of what ran with the victim


@dataclass(frozen=True, slots=True, kw_only=True)
class TestVerdict:
    """One test's category, with the evidence that decided it."""

    __test__ = False

    id: str
    file: str
    category: Category
    outcomes: dict[str, str]  # mode -> Outcome value
    # mode -> what pytest's summary counted for it there, where that is not its outcome:
    # ("error",) for a setup error, ("passed", "error") for a teardown's, ("xfailed",)
    pytest: dict[str, tuple[str, ...]] = field(default_factory=dict)
    reruns: tuple[str, ...] = ()  # Outcome values of the alone-reruns, all modes
    new: bool | None = None  # isolation regressions only, when a baseline was given
    message: str = ""
    log: str = ""
    reproduce: str = ""  # a ready-to-paste shell command that reproduces the finding
    inferred: tuple[str, ...] = ()  # modes whose outcome was concluded, not run
    cut: str = ""  # evidence the budget left out, e.g. "not rerun: budget"
    culprits: tuple[str, ...] = ()  # who broke it (test ids; files for concurrency)
    providers: tuple[str, ...] = ()  # depends-on-others: the tests after which it passes, or
    # the files with which it passes when merely collected (imported, none of their tests run)
    search: str = ""  # how the culprits were found, or why they were not
    probes: tuple[Probe, ...] = ()  # the culprit search's runs
    poisoned: str | None = None  # Outcome value alone with poisoned allocations, if run
    threaded: str | None = None  # Outcome value alone in the threads mode's threads, if run
    diagnosis: str = ""  # what the GPU-native evidence says the bug is
    sanitizer: str = ""  # compute-sanitizer's first error block
    notes: tuple[str, ...] = ()  # what an outcome did not decide, and why (threads)
    with_provider: str = ""  # depends-on-others: the command that passes, its provider first
    passes_alone: str = ""  # order-dependent: the command that passes, the test alone
    fingerprint: str = ""  # how it failed, normalized (evidence.fingerprints): its group's key
    inferred_from: tuple[str, ...] = ()  # not run alone: its group's representatives were
    strict: str = ""  # the strict runs (nothing else on its GPUs) that decided its category
    # the order plain pytest did not run that alone showed it (reversed, shuffled:SEED)
    found_in: str = ""

    @property
    def latent(self) -> bool:
        """Whether only an order plain pytest did not run showed it."""
        return bool(self.found_in)

    def said(self, mode: str) -> str:
        """Its outcome in `mode` in pytest's words: `error`, `passed+error`, `xfailed`."""
        return "+".join(self.pytest.get(mode, ())) or self.outcomes.get(mode, "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Root:
    """One culprit (or set of culprits) and every victim it was shown to break."""

    culprits: tuple[str, ...]
    category: Category  # the victims' category
    victims: tuple[str, ...]
    reproduce: str  # the minimal command, for the first victim
    left: tuple[str, ...] = ()  # what its culprits left that its victims' failure can touch


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The diff's answer for a whole run: `verdict.json`."""

    verdict: str  # "pass", "warn" or "fail"
    reasons: tuple[str, ...] = ()
    summary: dict[str, int] = field(default_factory=dict)
    modes: dict[str, dict[str, Any]] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)  # what the evidence runs cost
    tests: tuple[TestVerdict, ...] = ()
    roots: tuple[Root, ...] = ()  # culprits with their victims, most victims first
    # every mode: {"ran": bool, "why": str}, why it ran or did not
    checked: dict[str, dict[str, Any]] = field(default_factory=dict)
    left_behind: dict[str, tuple[str, ...]] = field(default_factory=dict)  # file -> its leftovers


@dataclass(frozen=True, slots=True, kw_only=True)
class TestEvidence:
    """What the evidence runs found out about one test."""

    __test__ = False

    id: str
    alone: tuple[Outcome, ...] = ()  # each run alone in a fresh interpreter
    cut: str = ""  # what the budget left undone, e.g. "not rerun: budget"
    culprits: tuple[str, ...] = ()  # test ids before it (files beside it, for concurrency)
    search: str = ""  # how they were found ("bisection", "cascade"), or why not
    probes: tuple[Probe, ...] = ()  # the search's runs, in order
    steps: Steps | None = None  # the search's runs against its bound, its waves, its losers
    poisoned: Outcome | None = None  # alone, every fresh device allocation filled with 0xFF
    threaded: Outcome | None = None  # alone, in the threads mode's N threads
    sanitizer: str = ""  # compute-sanitizer memcheck's first error block, alone
    fingerprint: str = ""  # its failure's group (gpuci.evidence.fingerprints), where it has one
    inferred_from: tuple[str, ...] = ()  # its group's representatives, which ran alone for it
    group: tuple[str, ...] = ()  # answered by group runs: the victims they ran, itself among them
    # the CUDA_VISIBLE_DEVICES its strict runs saw where not the check's serial view (they
    # kept a GPU of their own beside others' strict runs): its printed commands carry it
    gpu: str | None = None
    # the CUDA_VISIBLE_DEVICES every side of its pair runs saw, where they shared the
    # victim's (it ran the device out of memory): its pair command runs every side with it
    pair_gpu: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """Everything gpuci ran after a check's main passes: `OUT/evidence/evidence.json`."""

    gpu: str | None  # the CUDA_VISIBLE_DEVICES of the evidence's serial runs (see TestEvidence.gpu)
    budget_s: float | None  # None: no limit
    spent_s: float = 0.0
    runs: int = 0  # interpreters started
    phases: dict[str, dict[str, float]] = field(default_factory=dict)  # name -> runs, seconds
    concurrency: dict[str, int] = field(default_factory=dict)  # slots, most_at_once, beside
    tests: tuple[TestEvidence, ...] = ()
    leftovers: dict[str, tuple[Leftover, ...]] = field(default_factory=dict)  # by file
    strangers: dict[str, tuple[Stranger, ...]] = field(default_factory=dict)  # by file
    notes: tuple[str, ...] = ()  # what the report must say of the runs
