"""Modes: which modes a check runs, in which order, and why each runs or does not.

Threads is opt-in: it runs where `--modes` or `[tool.gpuci]` asks for it, or where the
suite's own pytest configuration sets `--parallel-threads` (the suite means to run in
threads); never because pytest-run-parallel happens to be installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuci.model import Mode, UsageError
from gpuci.run.proc.discover import Discovery, can_import

DEFAULT_MODES = (Mode.SUITE, Mode.PARALLEL, Mode.THREADS, Mode.ISOLATED)  # threads: if asked
NOT_ASKED = (
    "not asked for: no --modes, no modes in [tool.gpuci], no --parallel-threads in the"
    " suite's pytest configuration"
)
RUN_PARALLEL = "pytest_run_parallel"  # what runs each test in threads (threads mode)


@dataclass(frozen=True, slots=True, kw_only=True)
class AskedModes:
    """The modes the command line or `[tool.gpuci]` asked for, and who asked."""

    modes: list[Mode] | None  # None: nobody asked, the defaults decide
    asker: str  # "--modes suite,threads", or "modes in FILE [tool.gpuci]"


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """One effective value and where it came from: `command line`, a file, or `default`."""

    key: str  # as [tool.gpuci] spells it ("evidence-budget")
    value: Any
    source: str


def settings_to_json(settings: Mapping[str, Setting]) -> dict[str, Any]:
    """run.json's `settings`: key (as [tool.gpuci] spells it) -> {"value", "from"}."""
    return {s.key: {"value": _plain(s.value), "from": s.source} for s in settings.values()}


def _plain(value: Any) -> Any:
    if isinstance(value, Mode):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def asked_modes(text: str | None, settings: Mapping[str, Setting], python: str) -> AskedModes:
    """The modes asked for (`--modes` or [tool.gpuci], as `settings` says), checked:
    threads where `python` lacks pytest-run-parallel is refused."""
    if text is None:
        return AskedModes(modes=None, asker="")
    setting = settings.get("modes")
    source = setting.source if setting is not None else "command line"
    asker = f"--modes {text}" if source == "command line" else f"modes in {source}"
    modes = parse_modes(text)
    if Mode.THREADS in modes:
        require_run_parallel(python, asker)
    return AskedModes(modes=modes, asker=asker)


def choose_modes(asked: AskedModes, discovery: Discovery) -> tuple[list[Mode], dict[Mode, str]]:
    """The modes to run, in order, and for every mode why it runs or does not.

    Threads is opt-in: it runs where asked for, or where the suite's own pytest
    configuration sets `--parallel-threads` (the suite runs in threads already); never
    because pytest-run-parallel happens to be installed.
    """
    if asked.modes is not None:
        why = {m: asked.asker if m in asked.modes else f"left out of {asked.asker}" for m in Mode}
        return asked.modes, why
    threads = discovery.parallel_threads
    modes = [m for m in DEFAULT_MODES if threads or m is not Mode.THREADS]
    why = dict.fromkeys(Mode, "default")
    why[Mode.THREADS] = (
        f"the suite's pytest configuration sets --parallel-threads {threads}"
        if threads
        else NOT_ASKED
    )
    return modes, why


def runs_or_not(ran: bool) -> str:
    return "runs" if ran else "not run"


def mode_settings(
    settings: Mapping[str, Setting],
    mode_plan: tuple[Sequence[Mode], Mapping[Mode, str]] | None,
    mode: Mode,
) -> dict[str, Any]:
    """run.json's `settings`: each effective value and where it came from, and which
    modes the check runs and why (`gpuci run`: this one, as --mode asked)."""

    found = settings_to_json(settings)
    modes, why = mode_plan or ([mode], {mode: f"--mode {mode.value}"})
    source = found.get("modes", {}).get("from", "command line")
    found["modes"] = {
        "value": [m.value for m in modes],
        "from": source,
        "why": {m.value: text for m, text in why.items()},
    }
    return found


def threads_from_suite(settings: Mapping[str, Setting], discovery: Discovery) -> Setting | None:
    """Without --threads or `threads` in [tool.gpuci], as many threads as the suite sets:
    the threads setting that replaces the default, or None where none does."""
    setting = settings.get("threads")
    if discovery.parallel_threads and (setting is None or setting.source == "default"):
        return Setting(
            key="threads",
            value=discovery.parallel_threads,
            source="the suite's pytest configuration (--parallel-threads)",
        )
    return None


def require_run_parallel(python: str, asked: str) -> None:
    """Refuse threads mode, in one line, where `python` cannot import pytest-run-parallel."""
    if not can_import(python, RUN_PARALLEL):
        raise UsageError(
            f"{asked}: threads mode needs pytest-run-parallel, which {python} cannot import;"
            " pip install pytest-run-parallel where the suite runs, or leave threads out"
        )


def parse_modes(text: str) -> list[Mode]:
    """The modes of `--modes`, in the order given."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    valid = [m.value for m in Mode]
    unknown = [m for m in names if m not in valid]
    if unknown or not names or len(set(names)) != len(names):
        raise UsageError(f"--modes {text!r}: choose each at most once from {', '.join(valid)}")
    return [Mode(m) for m in names]
