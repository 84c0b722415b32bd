"""pytest's options given to gpuci before `--`: which of a command line's options gpuci does
not take pytest does (asked of pytest itself, so its plugins' options count), and the same
command with them after `--`, for the error that says so.

Only a command line argparse refused comes here: pytest is asked on the way to an error,
never on the way to a check.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

HELP_TIMEOUT_S = 60  # `pytest --help` loads the plugins and conftest.py files pytest would
# `-k EXPRESSION`, `--maxfail=num`, `--cache-show=[CACHESHOW]` (a value it may go without)
_OPTION = re.compile(r"(?P<name>--?[A-Za-z0-9][\w-]*)(?:[ =](?P<value>\S+))?")


def parse_pytest_help(text: str) -> dict[str, bool]:
    """Each option `pytest --help` lists (`-x`, `--exitfirst`) and whether it takes a value
    of its own (`-k EXPRESSION`: yes; `--cache-show=[CACHESHOW]`: no, it is optional)."""
    options: dict[str, bool] = {}
    for line in text.splitlines():
        if not line.startswith("  -"):
            continue
        spec = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        for part in spec.split(", "):
            match = _OPTION.fullmatch(part)
            if match:
                value = match["value"] or ""
                options[match["name"]] = bool(value) and not value.startswith("[")
    return options


def ask_pytest(python: str = sys.executable) -> dict[str, bool]:
    """pytest's options where gpuci runs (`python -m pytest --help`); none where it cannot
    say (no pytest, it failed, it hung)."""
    try:
        proc = subprocess.run(
            [python, "-m", "pytest", "--help"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=HELP_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_pytest_help(proc.stdout) if proc.returncode == 0 else {}


def option_name(word: str) -> str:
    """The option a word of a command line names: `--tb` for `--tb=short`, `-k` for `-kfoo`."""
    return word.split("=", 1)[0] if word.startswith("--") else word[:2]


def misplaced_hint(
    args: Sequence[str],
    pytest_args: Sequence[str],
    takes: Callable[[str], bool],
    pytest: Mapping[str, bool],
) -> str | None:
    """Where `args` (gpuci's, before `--`) hold options gpuci does not take (`takes`) and
    pytest does (`pytest`): the error that names them and the command with them after `--`
    (their values too); None where there are none."""
    kept: list[str] = []
    moved: list[str] = []
    names: list[str] = []
    words = iter(args)
    for word in words:
        name = option_name(word)
        if not word.startswith("-") or word == "-" or takes(name) or name not in pytest:
            kept.append(word)
            continue
        names.append(name)
        moved.append(word)
        attached = "=" in word if word.startswith("--") else len(word) > 2
        if pytest[name] and not attached:  # its value goes with it
            moved += [value for value in [next(words, None)] if value is not None]
    if not names:
        return None
    *others, last = dict.fromkeys(names)
    said = f"{', '.join(others)} and {last} are pytest's options" if others else ""
    said = said or f"{last} is pytest's option"
    command = shlex.join(["gpuci", *kept, "--", *moved, *pytest_args])
    return f"{said}: put pytest's options after --, e.g. {command}"
