"""Modes: which modes a check runs, in which order, and why each runs or does not.

Threads is opt-in: it runs where `--modes` or `[tool.gpuci]` asks for it, or where the
suite's own pytest configuration sets `--parallel-threads` (the suite means to run in
threads); never because pytest-run-parallel happens to be installed.

The latent orders (`reversed`, `shuffled:SEED`) run the whole suite in one interpreter in
an order plain pytest did not run. Each is opt-in; `reversed` is on by default where the
check has two or more GPUs: there its interpreter has a first device of its own beside the
suite interpreter's, so it costs the check no wall time the suite interpreter does not
take anyway (with one GPU the two would share it, and the suite interpreter is the floor
of a check's cost).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuci.model import LATENT_ORDERS, Mode, UsageError
from gpuci.run.proc.discover import Discovery, can_import

DEFAULT_MODES = (Mode.SUITE, Mode.PARALLEL, Mode.THREADS, Mode.ISOLATED)  # threads: if asked
NOT_ASKED = (
    "not asked for: no --modes, no modes in [tool.gpuci], no --parallel-threads in the"
    " suite's pytest configuration"
)
RUN_PARALLEL = "pytest_run_parallel"  # what runs each test in threads (threads mode)
SEED_SEP = ":"  # `shuffled:SEED`
MAX_SEED = 2**32 - 1  # a drawn seed is below it: short enough to type
LATENT_DEFAULT_GPUS = 2  # reversed runs by default from this many GPUs on


@dataclass(frozen=True, slots=True, kw_only=True)
class AskedModes:
    """The modes the command line or `[tool.gpuci]` asked for, and who asked."""

    modes: list[Mode] | None  # None: nobody asked, the defaults decide
    asker: str  # "--modes suite,threads", or "modes in FILE [tool.gpuci]"
    seed: int | None = None  # `shuffled:SEED`'s; None: the check draws one
    drawn: bool = False  # the seed is one the check drew (`with_seed`), not one asked for


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
    return AskedModes(modes=modes, asker=asker, seed=shuffle_seed(text))


def choose_modes(
    asked: AskedModes, discovery: Discovery, gpus: int = 0
) -> tuple[list[Mode], dict[Mode, str]]:
    """The modes to run, in order, and for every mode why it runs or does not.

    Threads is opt-in: it runs where asked for, or where the suite's own pytest
    configuration sets `--parallel-threads` (the suite runs in threads already); never
    because pytest-run-parallel happens to be installed. Reversed runs by default beside
    the suite interpreter where the check has `gpus` >= 2 (a first device of its own).
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
    if Mode.REVERSED in latent_orders(asked, gpus):
        modes.insert(modes.index(Mode.SUITE) + 1, Mode.REVERSED)
        why[Mode.REVERSED] = f"default with {gpus} GPUs: beside the suite, on a GPU of its own"
    else:
        why[Mode.REVERSED] = (
            "not asked for (--modes ...,reversed); on by default with two or more GPUs, and"
            f" this check has {gpus or 'none'}"
        )
    why[Mode.SHUFFLED] = "not asked for (--modes ...,shuffled or shuffled:SEED)"
    return modes, why


def latent_orders(asked: AskedModes, gpus: int) -> list[Mode]:
    """The latent orders the check runs, in the order of their slots (known before
    discovery: their interpreters start beside it): those asked for, else `reversed` from
    LATENT_DEFAULT_GPUS GPUs on."""
    if asked.modes is not None:
        return [m for m in LATENT_ORDERS if m in asked.modes]
    return [Mode.REVERSED] if gpus >= LATENT_DEFAULT_GPUS else []


def shuffle_seed(text: str) -> int | None:
    """The seed of `shuffled:SEED` in a --modes text; None where it names none."""
    for name in text.split(","):
        mode, sep, seed = name.strip().partition(SEED_SEP)
        if mode == Mode.SHUFFLED.value and sep:
            return int(seed)
    return None


def with_seed(asked: AskedModes) -> AskedModes:
    """`asked` with a shuffle's seed: the one named, else one drawn now."""
    if asked.seed is not None:
        return asked
    return dataclasses.replace(asked, seed=draw_seed(), drawn=True)


def draw_seed() -> int:
    """A shuffle's seed where `--modes shuffled` named none: printed, and in run.json."""
    return random.SystemRandom().randrange(MAX_SEED)


def files_in_order(mode: Mode, files: Sequence[str], seed: int | None) -> list[str]:
    """The files in the order one interpreter of `mode` runs them: collection order for
    the suite, reversed, or shuffled by `seed` (tests within a file keep their order)."""
    if mode is Mode.REVERSED:
        return list(reversed(files))
    if mode is Mode.SHUFFLED:
        shuffled = list(files)
        random.Random(seed).shuffle(shuffled)  # noqa: S311 -- an order to replay, no secret
        return shuffled
    return list(files)


def order_label(mode: Mode, seed: int | None) -> str:
    """How a latent order is named where a finding says it was found: `reversed`,
    `shuffled:SEED`."""
    seeded = mode is Mode.SHUFFLED and seed is not None
    return f"{mode.value}{SEED_SEP}{seed}" if seeded else mode.value


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
    """The modes of `--modes`, in the order given (`shuffled` may name its seed:
    `shuffled:SEED`, a whole number)."""
    names = [_mode_name(m.strip(), text) for m in text.split(",") if m.strip()]
    valid = [m.value for m in Mode]
    unknown = [m for m in names if m not in valid]
    if unknown or not names or len(set(names)) != len(names):
        raise UsageError(
            f"--modes {text!r}: choose each at most once from {', '.join(valid)}"
            f" (shuffled{SEED_SEP}SEED for a shuffle of your own)"
        )
    return [Mode(m) for m in names]


def _mode_name(name: str, text: str) -> str:
    """A mode's name from one word of --modes: `shuffled:SEED`'s seed checked and left off."""
    mode, sep, seed = name.partition(SEED_SEP)
    if not sep:
        return name
    if mode != Mode.SHUFFLED.value:
        raise UsageError(f"--modes {text!r}: only shuffled takes a seed ({name!r})")
    if not seed.isdigit() or int(seed) > MAX_SEED:
        raise UsageError(
            f"--modes {text!r}: {name!r}: the seed must be a whole number from 0 to {MAX_SEED}"
        )
    return mode
