"""What each interpreter of a check does with the user's pytest options: the table below,
checked against `gpuci.run.disk.side_outputs` and `gpuci.run.proc.launch`, and shown to
users in docs/pytest-options.md (which must hold it as rendered here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuci.model import SUITE_UNIT
from gpuci.run.disk.side_outputs import command_args, interpreter_args
from gpuci.run.proc.launch import Launch, pytest_command

# its suites run with the plugins installed beside pytest (xdist, pytest-cov, pytest-randomly)
pytestmark = pytest.mark.installed_plugins

DOC = Path(__file__).resolve().parent.parent / "docs" / "pytest-options.md"
OWN = Path("/OUT/.gpuci/cache/parallel/test_a.py")  # an interpreter's private cache
# what every interpreter but the plain run's adds after the user's arguments
ADDED = ["-o", f"cache_dir={OWN}", "-o", "log_file="]
# the user's option -> (every other interpreter gets, a printed command gets, why)
TABLE: dict[str, tuple[str, str, str]] = {
    "-k x": ("-k x", "-k x", "selects the same tests everywhere"),
    "-m gpu": ("-m gpu", "-m gpu", "selects the same tests everywhere"),
    "-p randomly": ("-p randomly", "-p randomly", "plus the plain run's seed, below"),
    "-W error": ("-W error", "-W error", "a warning is an error everywhere"),
    "-q": ("-q", "-q", "output only"),
    "--junitxml=r.xml": ("", "", "written by the plain run alone; the others write gpuci's own"),
    "--lf": ("", "", "the plain run chooses; the others run its choice, by id"),
    "--ff": ("", "", "orders the plain run only (a private cache holds no failures)"),
    "--sw": ("", "", "the plain run's; it stops at its first failure"),
    "--cache-clear": ("", "", "clears the user's cache once, in the plain run"),
    "--basetemp=t": (
        f"--basetemp={OWN}-basetemp",
        "",
        "each interpreter empties its own (pytest empties it at start)",
    ),
    "--log-file=l.log": ("", "", "the plain run's; the others log nowhere (-o log_file=)"),
    "-x": ("", "", "judges the plain run only; the others run every test"),
    "-xq": ("-q", "-q", "-x taken out of combined flags"),
    "--maxfail=2": ("", "", "judges the plain run only"),
    "--cov=pkg": ("--cov=pkg", "--cov=pkg --no-cov", "coverage is the plain run's (--no-cov)"),
    "--cov-fail-under=90": (
        "--cov-fail-under=90",
        "--cov-fail-under=90 --no-cov",
        "judged by the plain run only (--no-cov elsewhere)",
    ),
}


def _split(text: str) -> list[str]:
    return text.split() if text else []


@pytest.mark.parametrize("given", list(TABLE))
def test_each_option_is_what_the_table_says(given: str) -> None:
    others, printed, _ = TABLE[given]
    user = _split(given)
    got = interpreter_args(sys.executable, user, cache=OWN)
    got = [a for a in got if a != "--no-cov"]  # where pytest-cov is installed: after the rest
    assert got == [*_split(others), *ADDED]
    assert command_args(user) == _split(printed)
    # the plain run: the user's command, nothing added
    launch = Launch(
        key=SUITE_UNIT,
        ids=None,
        targets=("t",),
        slot=0,
        gpu=None,
        attempt=1,
        junit=Path("/OUT/suite/junit/suite.part1.xml"),
        label="",
    )
    assert pytest_command("python", user, launch, out=Path("/OUT/suite")) == [
        "python",
        "-m",
        "pytest",
        *user,
        "t",
    ]


def render_table() -> str:
    """The table as docs/pytest-options.md shows it."""
    lines = [
        "| you give | the plain run (suite) | every other interpreter | printed commands | why |",
        "| --- | --- | --- | --- | --- |",
    ]
    for given, (others, printed, why) in TABLE.items():
        shown = [f"`{given}`", f"`{given}`"]
        shown += [f"`{v}`" if v else "(left out)" for v in (others, printed)]
        lines.append("| " + " | ".join([*shown, why]) + " |")
    return "\n".join(lines).replace(str(OWN), "OWN")


def test_the_docs_show_the_table() -> None:
    assert render_table() in DOC.read_text(encoding="utf-8"), render_table()
