"""How much gpuci prints and whether in colour: `-q`/`-v` and `--color`, by pytest's rules.

One command has one terminal, set by the command line (`using`) and read where a line is
printed (`current`), as pytest's terminal reporter is one per session: the progress lines
of the screens and the evidence, and the verdict's summary, come from many stages, and
what each stage prints does not change what it does.

Verbosity counts as pytest's does (`-v` +1, `-q` -1): below 0 the progress says only what
ended (each mode's counts, warnings, errors) and each finding is its headline; at 1 and
above each file's line names its tests that did not pass, and the summary lists every
finding and victim, none cut.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TextIO

COLORS = ("auto", "yes", "no")  # --color, as pytest's
QUIET = -1  # a line said at this level is printed under -q too
VERBOSE = 1  # only under -v

_SGR = {"red": "31", "green": "32", "yellow": "33", "bold": "1"}


def should_do_markup(file: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """pytest's own rule (`_pytest._io.terminalwriter.should_do_markup`): PY_COLORS=1 or 0
    decides; else a non-empty NO_COLOR says no, a non-empty FORCE_COLOR yes; else colour
    only on a terminal that is not TERM=dumb (never in a pipe or a file)."""
    env = os.environ if environ is None else environ
    if env.get("PY_COLORS") == "1":
        return True
    if env.get("PY_COLORS") == "0":
        return False
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    isatty = getattr(file, "isatty", None)
    return bool(isatty and isatty()) and env.get("TERM") != "dumb"


@dataclass(frozen=True, slots=True, kw_only=True)
class Terminal:
    """One command's terminal: its verbosity (-q -1, default 0, -v 1) and --color."""

    verbosity: int = 0
    color: str = "auto"  # yes, no, or auto: pytest's rule per stream

    def shows(self, level: int) -> bool:
        """Whether a line said at `level` (QUIET, 0 or VERBOSE) is printed."""
        return self.verbosity >= level

    @property
    def quiet(self) -> bool:
        return self.verbosity < 0

    @property
    def verbose(self) -> bool:
        return self.verbosity > 0

    def markup(self, file: TextIO) -> bool:
        """Whether text for `file` is coloured: --color=yes always, no never, auto as pytest."""
        if self.color == "yes":
            return True
        if self.color == "no":
            return False
        return should_do_markup(file)

    def paint(self, text: str, color: str, file: TextIO) -> str:
        """`text` in `color` (red, green, yellow, bold) where `file` gets colour, else as is."""
        if not text or not self.markup(file):
            return text
        return f"\x1b[{_SGR[color]}m{text}\x1b[0m"


_current = Terminal()


def current() -> Terminal:
    """The terminal of the command that runs (the default one outside any)."""
    return _current


@contextlib.contextmanager
def using(terminal: Terminal) -> Iterator[Terminal]:
    """`terminal` is the command's while the block runs, the one before it after."""
    global _current  # noqa: PLW0603 (one command's terminal, as pytest's reporter)
    before, _current = _current, terminal
    try:
        yield terminal
    finally:
        _current = before
