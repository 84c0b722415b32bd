"""Resume: continue an interrupted results directory (`--resume`), or say what a run replaces.

A mode's `run.json`, written when gpuci is stopped (Ctrl-C, SIGTERM), says which files and
tests finished; `run.run_mode` keeps them and runs the rest, as it resumes after a crash.
A resumed command must ask for what the interrupted one asked for (its PATHS and pytest
arguments; its mode is its directory): otherwise it is refused before anything is touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuci import shell
from gpuci.formats import read_mode_run
from gpuci.model import (
    INTERRUPTED,
    FileRun,
    InputError,
    Mode,
    ModeRun,
    Outcome,
    TestResult,
    UsageError,
    unit_of,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Earlier:
    """An interrupted run of the same mode that --resume continues, by scheduled unit."""

    files: dict[str, FileRun]
    tests: dict[str, list[TestResult]]

    @classmethod
    def of(cls, run: ModeRun) -> Earlier:
        """What `run` ran itself (not what it inferred from another mode)."""
        tests: dict[str, list[TestResult]] = {}
        for test in run.tests:
            if not test.inferred:
                key = unit_of(run.mode) or test.file
                tests.setdefault(key, []).append(test)
        return cls(files={f.file: f for f in run.files if not f.inferred}, tests=tests)

    def finished(self, key: str) -> list[TestResult]:
        """The unit's tests with an outcome of their own: all but those gpuci stopped."""
        return [t for t in self.tests.get(key, ()) if not was_interrupted(t)]


def was_interrupted(test: TestResult) -> bool:
    """Not run because gpuci was stopped (Ctrl-C, SIGTERM): --resume runs it."""
    return test.outcome is Outcome.NOT_RUN and test.message.startswith(INTERRUPTED)


def has_results(out: Path) -> bool:
    """Whether a mode directory holds an earlier run (finished or not)."""
    return (out / "run.json").exists() or (out / "journal").exists()


def given_paths(paths: Sequence[str]) -> tuple[str, ...]:
    """PATHS as run.json records them: absolute, so another working directory differs."""
    return tuple(str(Path(p).resolve()) for p in paths)


def earlier_run(
    mode_dir: Path,
    *,
    paths: Sequence[str],
    pytest_args: Sequence[str],
    threads: int | None = None,
    poison: bool = False,
) -> ModeRun | None:
    """The run in `mode_dir` that --resume continues; None where none began there.

    A directory it cannot continue, or one run with other arguments, is a UsageError.
    """
    path = mode_dir / "run.json"
    if not path.exists():
        if has_results(mode_dir):
            raise UsageError(
                f"--resume: {mode_dir} has no run.json (gpuci was killed before it could"
                " write one); run without --resume to start it over"
            )
        return None
    try:
        run = read_mode_run(path)
    except InputError as exc:
        raise UsageError(f"--resume: {exc}") from None
    wanted = (given_paths(paths), tuple(pytest_args))
    if (run.paths, run.pytest_args) != wanted:
        raise UsageError(
            f"--resume: {mode_dir} was run with {_describe(run.paths, run.pytest_args)},"
            f" this command gives {_describe(*wanted)}; give the same arguments,"
            " or leave out --resume to replace it"
        )
    if run.threads != threads:
        raise UsageError(
            f"--resume: {mode_dir} ran each test in {run.threads} threads, this command in"
            f" {threads}; give the same --threads, or leave out --resume to replace it"
        )
    if run.poison != poison:
        raise UsageError(
            f"--resume: {mode_dir} was run {'with' if run.poison else 'without'} --poison;"
            " give the same, or leave out --resume to replace it"
        )
    return run


def check_extra_modes(out: Path, modes: Sequence[Mode]) -> None:
    """--resume of a check: a mode in OUT that this check does not run is a mismatch."""
    extra = [m.value for m in Mode if m not in modes and has_results(out / m.value)]
    if extra:
        raise UsageError(
            f"--resume: {out} also holds {', '.join(extra)}, which --modes leaves out;"
            " give the same --modes, or leave out --resume to replace it"
        )


def _describe(paths: Sequence[str], pytest_args: Sequence[str]) -> str:
    text = f"PATHS {shell.join(paths)}" if paths else "no PATHS recorded"
    return f"{text} and pytest arguments {shell.join(pytest_args) or '(none)'}"
