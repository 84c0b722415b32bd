"""Side outputs: the files the user's pytest arguments write are the plain run's.

A check starts many interpreters with the user's pytest arguments; plain pytest is one of
them, the suite interpreter, which runs them as given, nothing added (`launch`). What the
user's arguments write beside the test results comes from it alone, as plain pytest
writes it; every other interpreter gets the user's arguments too (a test sees there what
it sees in plain pytest), with what must not be shared redirected (`interpreter_args`):

- `--junitxml F` (`--junit-xml`): the plain run writes F itself. Where the suite took more
  than one interpreter (a crash resumed, --resume), F holds the suite's merged cases
  (`write_plain_junit`). The others write gpuci's own JUnit file instead.
- coverage (`--cov`, pytest-cov): every other interpreter gets `--no-cov`, last, where its
  python has pytest-cov (a `--cov` in the suite's addopts is switched off as well), so
  `--cov-fail-under` judges the plain run only.
- pytest's cache: the plain run reads and writes the user's (`--lf`, `--ff`, `--nf`,
  `--sw`, `--cache-clear` are its alone); every other interpreter has a cache directory of
  its own (`-o cache_dir=...`: `request.config.cache` works, and writes nobody else's).
  Where the cache selects tests (`SELECTING`), what they run comes from gpuci's discovery,
  the suite interpreter's own collection after --lf and --sw chose (GPUCI_ONLY; a screen
  otherwise runs its files, as the user would): a file alone under --lf would run all its
  tests where the suite's lastfailed names none of them (pytest's LFPlugin), and an
  evidence run of a test that passed last time would run nothing.
- `--basetemp`: each other interpreter gets one of its own beside its cache (pytest empties
  --basetemp at its start: interpreters side by side would empty each other's);
  `--log-file`: the plain run's, the others log nowhere.
- options that judge the whole run (`WHOLE_RUN`: -x, --maxfail): the plain run's alone; the
  others run every test they are given.
- pytest-randomly's seed: the plain run draws it; every other interpreter, and every printed
  command, gets that one (`seed_args`).

Options that write a file gpuci cannot keep the plain run's are refused (REFUSED).
docs/pytest-options.md shows all of this as a table (tests/test_options_table.py).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from gpuci.model import UsageError

JUNIT = ("--junitxml", "--junit-xml")
# pytest's cache options, each with whether it takes a value
CACHE = {
    "--lf": False,
    "--last-failed": False,
    "--ff": False,
    "--failed-first": False,
    "--nf": False,
    "--new-first": False,
    "--cache-clear": False,
    "--sw": False,
    "--stepwise": False,
    "--sw-skip": False,
    "--stepwise-skip": False,
    "--sw-reset": False,
    "--stepwise-reset": False,
    "--lfnf": True,
    "--last-failed-no-failures": True,
}
# the cache options that choose which tests run (the others only order them)
SELECTING = (
    "--lf",
    "--last-failed",
    "--sw",
    "--stepwise",
    "--sw-skip",
    "--stepwise-skip",
    "--lfnf",
    "--last-failed-no-failures",
)
SUITE_ONLY = {"--basetemp": True, "--log-file": True}  # the suite interpreter's alone
# options that judge the whole run: the plain run's alone (the others run every test)
WHOLE_RUN = {"--exitfirst": False, "--maxfail": True}
EXITFIRST = "x"  # -x, alone or among other short flags (-xvs)
SHORT_FLAGS = frozenset("xvqsl")  # pytest's short options without a value, combinable
SHORT_VALUED = ("-k", "-m", "-p", "-o", "-W", "-c", "-r")  # their value may be the next arg
BASETEMP_SUFFIX = "-basetemp"  # beside an interpreter's private cache
# every option only the plain run (the suite interpreter) gets, with whether it takes a value
PLAIN_RUNS_ONLY = {**dict.fromkeys(JUNIT, True), **CACHE, **SUITE_ONLY}
NO_LOG_FILE = ("-o", "log_file=")  # an empty log_file: pytest logs to os.devnull
NO_COV = "--no-cov"
COV_PLUGIN = "pytest_cov"
AUTOLOAD_OFF = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"
# options that write a file (or post) once per interpreter: the last one would win
REFUSED = {
    "--html": "pytest-html's report",
    "--report-log": "pytest-reportlog's log",
    "--json-report": "pytest-json-report's report",
    "--json-report-file": "pytest-json-report's report",
    "--alluredir": "allure-pytest's results",
    "--csv": "pytest-csv's table",
    "--benchmark-json": "pytest-benchmark's results",
    "--benchmark-save": "pytest-benchmark's saved run",
    "--benchmark-autosave": "pytest-benchmark's saved run",
    "--debug": "pytest's debug log",
    "--pastebin": "pytest's pastebin post",
    "--cache-show": "pytest's cache listing (not a test run)",
    "--resultlog": "pytest's result log",
    "--result-log": "pytest's result log",
}
PROBE_TIMEOUT_S = 60


def interpreter_args(python: str, user_args: Sequence[str], *, cache: Path) -> list[str]:
    """The pytest arguments of an interpreter of `python` other than the suite's (screens,
    evidence, discovery), from the user's: none of the user's side outputs or whole-run
    judgements (`shared_args`); pytest's cache in `cache`, its own; a --basetemp of its
    own beside it (one given is emptied by each pytest that starts)."""
    args = shared_args(user_args)
    if any(name == "--basetemp" for name, _ in _options(user_args)):
        args.append(f"--basetemp={cache.with_name(cache.name + BASETEMP_SUFFIX)}")
    args += ["-o", f"cache_dir={cache}", *NO_LOG_FILE]
    if _has_pytest_cov(python, user_args):
        args.append(NO_COV)  # last: pytest-cov warns of a --cov after it
    return args


def shared_args(user_args: Sequence[str]) -> list[str]:
    """The user's arguments an interpreter other than the suite's keeps: all but the side
    outputs only the plain run writes (`PLAIN_RUNS_ONLY`) and the options that judge the
    whole run (`WHOLE_RUN`: -x, --maxfail; --cov-fail-under goes with coverage)."""
    return _without_exitfirst(_without(user_args, {**PLAIN_RUNS_ONLY, **WHOLE_RUN}))


def selects_by_cache(user_args: Sequence[str]) -> bool:
    """Whether the user's arguments let pytest's cache choose the tests (`SELECTING`):
    then only the suite interpreter may choose, and the others run its choice by id."""
    return any(name in SELECTING for name, _ in _options(user_args))


def seed_args(seed: int | None) -> tuple[str, ...]:
    """The arguments that give an interpreter the plain run's pytest-randomly seed."""
    return () if seed is None else ("-p", "randomly", f"--randomly-seed={seed}")


def command_args(user_args: Sequence[str]) -> list[str]:
    """The user's arguments as a printed command (a reproduce command) carries them: what
    the evidence interpreter that stands behind it ran with, of the user's (`shared_args`);
    none of the user's side outputs (a pasted command must not overwrite the plain run's
    JUnit file or coverage, nor let the cache choose its tests)."""
    args = shared_args(user_args)
    if any(name == "--cov" or name.startswith("--cov-") for name, _ in _options(args)):
        args.append(NO_COV)  # last, as every interpreter but the suite's gets it
    return args


def plain_junit(user_args: Sequence[str]) -> Path | None:
    """The user's `--junitxml` (the last one, as argparse takes it), absolute as pytest
    makes it; None where none was given."""
    found: str | None = None
    for name, value in _options(user_args):
        if name in JUNIT and value is not None:
            found = value
    if found is None:
        return None
    # where pytest writes it: its variables and ~ expanded, from the working directory
    return Path(os.path.normpath(Path.cwd() / Path(os.path.expandvars(found)).expanduser()))


def write_plain_junit(target: Path, source: Path) -> None:
    """Write the user's JUnit file `target` from `source`: the suite interpreter's own,
    where one interpreter ran the whole suite, else the suite's merged file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def refuse_side_outputs(user_args: Sequence[str], *, suite: bool, asker: str) -> None:
    """Refuse what gpuci cannot write as plain pytest would: an option of REFUSED, and
    --junitxml, --cov or the cache options where no suite interpreter runs (`suite`)."""
    for name, _ in _options(user_args):
        if name in REFUSED:
            raise UsageError(
                f"{name}: {REFUSED[name]} would be written by each of gpuci's interpreters,"
                " the last one winning; run plain pytest for it, or leave it out"
            )
    if suite:
        return
    for name, _ in _options(user_args):
        if name in JUNIT or name in CACHE or name == "--cov" or name.startswith("--cov-"):
            raise UsageError(
                f"{name}: only the suite interpreter (the plain pytest run) writes or reads"
                f" it, and {asker} runs none; add the suite mode, or leave it out"
            )


def _options(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """Each long option in `args` with its value (`--x=V`, or the next argument for an
    option known to take one); pytest allows no abbreviations."""
    valued = {**PLAIN_RUNS_ONLY, **WHOLE_RUN}
    found: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if arg.startswith("--") and eq:
            found.append((name, value))
        elif arg.startswith("--") and valued.get(arg) and i + 1 < len(args):
            found.append((arg, args[i + 1]))
            i += 1
        elif arg.startswith("--"):
            found.append((arg, None))
        i += 1
    return found


def _without(args: Sequence[str], dropped: dict[str, bool]) -> list[str]:
    """`args` without the options named in `dropped` (True: it takes a value)."""
    kept: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name = arg.partition("=")[0]
        if arg in dropped:
            i += 2 if dropped[arg] else 1
            continue
        if name in dropped and "=" in arg:
            i += 1
            continue
        kept.append(arg)
        i += 1
    return kept


def _without_exitfirst(args: Sequence[str]) -> list[str]:
    """`args` without -x, alone or among combined short flags (`-xvs` is `-vs`); the value
    of a short option (`-rx`, `-k x`) is left alone."""
    kept: list[str] = []
    value_next = False
    for arg in args:
        if value_next or not arg.startswith("-") or arg.startswith("--"):
            kept.append(arg)
            value_next = False
            continue
        value_next = arg in SHORT_VALUED
        flags = ""
        for i, letter in enumerate(arg[1:], start=1):
            if letter not in SHORT_FLAGS:  # a valued option: the rest is its value
                flags += arg[i:]
                break
            flags += "" if letter == EXITFIRST else letter
        if flags:
            kept.append(f"-{flags}")
    return kept


def _has_pytest_cov(python: str, user_args: Sequence[str]) -> bool:
    """Whether pytest-cov loads in `python`'s pytest: its entry point is there and plugins
    load by themselves, or the arguments load it (`-p pytest_cov`)."""
    named = any(COV_PLUGIN in arg for arg in user_args)
    if python == sys.executable:  # gpuci's own interpreter, in gpuci's own environment
        return _cov_loads_here(named=named)
    return _has_cov_entry_point(python, named=named)


@functools.cache
def _cov_loads_here(*, named: bool) -> bool:
    """What `_has_cov_entry_point` asks a fresh interpreter, answered in this one, which is
    that interpreter: the same executable, environment and site-packages; only the first
    entry of sys.path differs (this process's script folder where `python -c` has the
    working directory), so the distributions are looked up as that interpreter sees them."""
    off = os.environ.get(AUTOLOAD_OFF) and not named
    if off and COV_PLUGIN not in os.environ.get("PYTEST_PLUGINS", ""):
        return False
    # PYTHONSAFEPATH (3.11), which that interpreter inherits: no folder goes first there
    safe = getattr(sys.flags, "safe_path", False)
    path = sys.path if safe else [str(Path.cwd()), *sys.path[1:]]
    return any(
        entry.name == COV_PLUGIN and entry.group == "pytest11"
        for dist in importlib.metadata.distributions(path=path)
        for entry in dist.entry_points
    )


@functools.cache
def _has_cov_entry_point(python: str, *, named: bool) -> bool:
    """Whether `python` (the suite's, not gpuci's own: a wrapper script may set its own
    environment, so the probe asks in it) has pytest-cov's pytest11 entry point, and
    loads it: plugins load by themselves, or PYTEST_PLUGINS or the arguments (`named`)
    name it."""
    probe = (
        "import importlib.metadata as m, os, sys;"
        f"off = os.environ.get({AUTOLOAD_OFF!r}) and not {named!r}"
        f" and {COV_PLUGIN!r} not in os.environ.get('PYTEST_PLUGINS', '');"
        "sys.exit(bool(off) or not any("
        f"e.name == {COV_PLUGIN!r} for e in m.entry_points(group='pytest11')))"
    )
    try:
        proc = subprocess.run(
            [python, "-c", probe],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0
