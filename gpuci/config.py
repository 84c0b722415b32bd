"""Config: the suite's `[tool.gpuci]` table in `pyproject.toml`, read and checked.

Found as pytest finds its own configuration: from the common ancestor of the paths given,
upwards, the first `pyproject.toml` holding a `[tool.gpuci]` table; the search stops at
the suite's rootdir (the first directory with a pytest configuration file), so a suite
with its own `pytest.ini` does not inherit the settings of a project around it. The
command line overrides every key; `Setting` records where each effective value came from.
"""

from __future__ import annotations

import configparser
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci.formats import read_mode_run
from gpuci.model import Category, GpuciError, Mode, UsageError
from gpuci.run.sched.modes import SEED_SEP, Setting, parse_modes

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

PYPROJECT = "pyproject.toml"
TABLE = "[tool.gpuci]"
KNOWN = "known"  # the policy's word for isolation problems a baseline already had
# the fork server's key, gone with it
REMOVED = "preload"
REMOVED_WHY = (
    "is gone: every interpreter is a fresh `python -m pytest` (forked ones were unfaithful);"
    " delete the key"
)
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """The checked `[tool.gpuci]` table; None (or empty) where a key is not set."""

    path: Path | None = None  # the pyproject.toml it came from; None: none found
    modes: str | None = None  # as --modes spells them: "suite,parallel,shuffled:7"
    workers: str | None = None  # "auto" or a whole number, as --workers takes it
    timeout: float | None = None
    threads: int | None = None
    reruns: int | None = None
    evidence_budget: float | None = None
    gpus: str | None = None  # "0,1", as --gpus takes it
    gpus_per_slot: int | None = None
    fail_on: str | None = None  # comma list, as --fail-on takes it
    allow: str | None = None
    secrets: tuple[str, ...] = ()  # environment variables no child may see
    keys: frozenset[str] = field(default_factory=frozenset)  # the keys the table set

    @property
    def source(self) -> str:
        """How run.json names where a value came from."""
        return f"{self.path} {TABLE}" if self.path else "default"


def find_pyproject(paths: Sequence[str | Path]) -> Path | None:
    """The `pyproject.toml` with a `[tool.gpuci]` table that configures PATHS, if any."""
    resolved = [Path(p).resolve() for p in paths] or [Path.cwd()]
    start = Path(os.path.commonpath([str(p) for p in resolved]))
    if not start.is_dir():
        start = start.parent
    for directory in (start, *start.parents):
        candidate = directory / PYPROJECT
        data = _toml(candidate) if candidate.is_file() else {}
        if isinstance(data.get("tool"), dict) and "gpuci" in data["tool"]:
            return candidate
        if _is_pytest_rootdir(directory, data):
            return None  # the suite's own rootdir: what lies above configures something else
    return None


def _is_pytest_rootdir(directory: Path, pyproject: Mapping[str, Any]) -> bool:
    """Whether pytest would take its configuration from this directory."""
    if (directory / "pytest.ini").is_file() or (directory / ".pytest.ini").is_file():
        return True
    tool = pyproject.get("tool")
    if isinstance(tool, dict) and isinstance(tool.get("pytest"), dict):
        return "ini_options" in tool["pytest"]
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        path = directory / name
        if path.is_file():
            parser = configparser.ConfigParser(interpolation=None)
            try:
                parser.read(path, encoding="utf-8")
            except (configparser.Error, UnicodeDecodeError):
                continue
            if parser.has_section(section):
                return True
    return False


def _toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            data: dict[str, Any] = tomllib.load(f)
            return data
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: not readable as TOML ({exc})") from None


def load_config(paths: Sequence[str | Path]) -> Config:
    """The `[tool.gpuci]` table that configures PATHS, checked; an empty Config if none."""
    path = find_pyproject(paths)
    if path is None:
        return Config()
    return parse_config(_toml(path)["tool"]["gpuci"], path)


def parse_config(table: Any, path: Path) -> Config:
    """Check every key and type of a `[tool.gpuci]` table; a wrong one is a UsageError
    naming the key and the file."""
    if not isinstance(table, dict):
        raise UsageError(f"{path}: {TABLE} must be a table, got {_kind(table)}")
    if REMOVED in table:  # a key that once worked gets the reason, not "unknown"
        raise UsageError(f"{path}: {TABLE} {REMOVED!r} {REMOVED_WHY}")
    unknown = sorted(k for k in table if k not in _PARSERS)
    if unknown:
        raise UsageError(
            f"{path}: {TABLE} has unknown key {unknown[0]!r};"
            f" the keys are {', '.join(sorted(_PARSERS))}"
        )
    values: dict[str, Any] = {}
    for key, value in table.items():
        attribute, parse = _PARSERS[key]
        try:
            values[attribute] = parse(value)
        except ValueError as exc:
            raise UsageError(f"{path}: {TABLE} {key}: {exc}") from None
    return Config(path=path, keys=frozenset(table), **values)


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def _whole(minimum: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"expected a whole number, at least {minimum}, got {_kind(value)}")
        return value

    return parse


def _seconds(*, zero: bool) -> Callable[[Any], float]:
    def parse(value: Any) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not (value >= 0 if zero else value > 0) or value == float("inf"):
            least = "0 or more" if zero else "more than 0"
            raise ValueError(f"expected a number of seconds, {least}, got {_kind(value)}")
        return float(value)

    return parse


def _workers(value: Any) -> str:
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f'expected a whole number, at least 1, or "auto", got {_kind(value)}')
    return str(value)


def _names(what: str, valid: Callable[[str], bool]) -> Callable[[Any], tuple[str, ...]]:
    def parse(value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"expected a list of {what}, got {_kind(value)}")
        bad = [v for v in value if not valid(v)]
        if bad:
            raise ValueError(f"expected a list of {what}, got {bad[0]!r} in it")
        if len(set(value)) != len(value):
            raise ValueError(f"expected each of the {what} once, got {value!r}")
        return tuple(value)

    return parse


def _modes(value: Any) -> str:
    valid = {m.value for m in Mode}

    def known(name: str) -> bool:  # `shuffled:SEED` names its seed (parse_modes checks it)
        return name.partition(SEED_SEP)[0] in valid

    names = _names(f"modes ({', '.join(m.value for m in Mode)})", known)(value)
    if not names:
        raise ValueError("expected at least one mode")
    try:
        parse_modes(",".join(names))
    except UsageError as exc:
        raise ValueError(str(exc).removeprefix("--modes ")) from None
    return ",".join(names)


def _categories(*words: str) -> Callable[[Any], str]:
    valid = {c.value for c in Category} | set(words)
    choices = ", ".join([*(c.value for c in Category), *words])
    return lambda value: ",".join(_names(f"categories ({choices})", valid.__contains__)(value))


def _gpus(value: Any) -> str:
    if isinstance(value, list) and value and all(_gpu_index(v) for v in value):
        return ",".join(str(v) for v in value)
    if isinstance(value, str) and value.strip():
        return value
    raise ValueError(f'expected a list of GPU indices or a string like "0,1", got {_kind(value)}')


def _gpu_index(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or (
        isinstance(value, str) and bool(value.strip())
    )


_PARSERS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "modes": ("modes", _modes),
    "workers": ("workers", _workers),
    "timeout": ("timeout", _seconds(zero=False)),
    "threads": ("threads", _whole(2)),
    "reruns": ("reruns", _whole(0)),
    "evidence-budget": ("evidence_budget", _seconds(zero=True)),
    "gpus": ("gpus", _gpus),
    "gpus-per-slot": ("gpus_per_slot", _whole(1)),
    "fail-on": ("fail_on", _categories("latent")),
    "allow": ("allow", _categories(KNOWN)),
    "secrets": (
        "secrets",
        _names("environment variable names", lambda v: bool(_VARIABLE.fullmatch(v))),
    ),
}

# What a key is where neither the command line nor the table sets it.
DEFAULTS: dict[str, Any] = {"workers": "auto", "threads": 4, "reruns": 2, "secrets": ()}
CONFIG_ONLY = ("secrets",)  # keys with no command-line option (yet)


def effective_settings(given: Mapping[str, Any], config: Config) -> dict[str, Setting]:
    """Each key of `given` (a command's options by attribute, None where not given), and
    the keys only the table sets: the command line's value, else the table's, else the
    default, with where it came from."""
    settings: dict[str, Setting] = {}
    for key, (attribute, _) in _PARSERS.items():
        if attribute not in given and attribute not in CONFIG_ONLY:
            continue  # the command does not take it
        value = given.get(attribute)
        if value is not None:
            settings[attribute] = Setting(key=key, value=value, source="command line")
        elif key in config.keys:
            settings[attribute] = Setting(
                key=key, value=getattr(config, attribute), source=config.source
            )
        else:
            settings[attribute] = Setting(key=key, value=DEFAULTS.get(attribute), source="default")
    return settings


# the options [tool.gpuci] may set, by command
CONFIGURED = {
    "run": (
        "workers",
        "timeout",
        "threads",
        "reruns",
        "evidence_budget",
        "gpus",
        "gpus_per_slot",
        "allow",  # only `skipped` counts: a run where every test skipped passes
    ),
    "check": (
        "modes",
        "workers",
        "timeout",
        "threads",
        "reruns",
        "evidence_budget",
        "gpus",
        "gpus_per_slot",
        "fail_on",
        "allow",
    ),
    "diff": ("fail_on", "allow"),
    "explain": ("evidence_budget", "fail_on", "allow"),
}


def configure(
    command: str, given: Mapping[str, Any], *, paths: Sequence[str] = (), out: Path | None = None
) -> tuple[Config, dict[str, Setting]]:
    """The suite's `[tool.gpuci]` and each option `command` takes from it: the command
    line's value (`given`, by attribute), else the table's, else the default, with where it
    came from. `run` and `check` find the table from their PATHS, the others from the suite
    an OUT's runs record."""
    names = CONFIGURED.get(command)
    if names is None:
        return Config(), {}
    if command in ("run", "check"):
        config = load_config(paths)
    else:  # a results directory: configured by the suite it ran, where that is here
        rootdir = _rootdir_of(out) if out is not None else None
        config = load_config([rootdir]) if rootdir is not None else Config()
    return config, effective_settings({n: given.get(n) for n in names}, config)


def _rootdir_of(out: Path) -> Path | None:
    """The suite directory an OUT's runs record, where it exists on this machine."""
    for path in sorted(out.glob("*/run.json")) + sorted(out.glob("*/shard-*/run.json")):
        try:
            rootdir = Path(read_mode_run(path).rootdir)
        except GpuciError:
            continue
        return rootdir if rootdir.is_dir() else None
    return None
