"""gpuci/pytest_options.py: pytest's options given before `--`, named, and the command with
them after it."""

from __future__ import annotations

import sys

from gpuci.pytest_options import ask_pytest, misplaced_hint, parse_pytest_help

HELP = """\
usage: python -m pytest [options] [file_or_dir] [file_or_dir] [...]

general:
  -k EXPRESSION         Only run tests matching the given keyword expression,
                        e.g. -k 'test_method or test_other'.
  -x, --exitfirst       Exit instantly on first error or failed test
  --maxfail=num         Exit after first num failures or errors
  --lf, --last-failed   Rerun only the tests that failed at the last run (or all
  --cache-show=[CACHESHOW]
                        Show cache contents, don't perform collection or tests.
  -p name               Early-load given plugin module name or entry point

[pytest] ini-options in the first pytest.ini|tox.ini|setup.cfg|pyproject.toml file found:
  markers (linelist):   Register new markers for test functions
"""
GPUCI = {"--out", "-q", "-v", "--color", "--timeout"}


def test_pytests_help_gives_its_options_and_which_take_a_value() -> None:
    assert parse_pytest_help(HELP) == {
        "-k": True,
        "-x": False,
        "--exitfirst": False,
        "--maxfail": True,
        "--lf": False,
        "--last-failed": False,
        "--cache-show": False,  # its value is optional: the next word is not its
        "-p": True,
    }


def hint(*args: str, pytest_args: tuple[str, ...] = ()) -> str | None:
    return misplaced_hint(args, pytest_args, GPUCI.__contains__, parse_pytest_help(HELP))


def test_the_hint_moves_pytests_options_and_their_values_after_the_separator() -> None:
    assert hint("check", "tests", "-k", "foo") == (
        "-k is pytest's option: put pytest's options after --, e.g. gpuci check tests -- -k foo"
    )
    assert hint("check", "tests", "-x", "--out", "o", "-p", "no:randomly", "--maxfail=2") == (
        "-x, -p and --maxfail are pytest's options: put pytest's options after --, e.g."
        " gpuci check tests --out o -- -x -p no:randomly --maxfail=2"
    )
    # attached values stay attached; what already followed -- stays after them
    assert hint("check", "t", "-kfoo", "--out", "o", pytest_args=("-s",)) == (
        "-k is pytest's option: put pytest's options after --, e.g."
        " gpuci check t --out o -- -kfoo -s"
    )
    assert hint("check", "t", "-k", "a or b") is not None
    assert "-- -k 'a or b'" in str(hint("check", "t", "-k", "a or b"))  # quoted as a shell


def test_no_hint_where_pytest_does_not_know_the_option_or_gpuci_takes_it() -> None:
    assert hint("check", "tests", "--bogus") is None
    assert hint("check", "tests", "--out", "o", "-q", "--timeout", "3") is None
    assert hint("check", "-", "--out", "o") is None


def test_pytest_is_asked_where_gpuci_runs() -> None:
    options = ask_pytest(sys.executable)
    assert options["-k"] is True and options["-x"] is False and options["--lf"] is False
    assert ask_pytest("/nonexistent/python") == {}  # no pytest to ask: no hint, no error
