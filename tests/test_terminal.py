"""gpuci/terminal.py: pytest's colour rule, --color over it, and the verbosity's levels."""

from __future__ import annotations

import io

import pytest

from gpuci.terminal import QUIET, VERBOSE, Terminal, current, should_do_markup, using


class Tty(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("environ", "tty", "markup"),
    [
        ({}, True, True),  # a terminal: colour
        ({}, False, False),  # a pipe or a file: never, unless asked
        ({"TERM": "dumb"}, True, False),
        ({"NO_COLOR": "1"}, True, False),
        ({"NO_COLOR": ""}, True, True),  # set but empty: not set, as pytest reads it
        ({"FORCE_COLOR": "1"}, False, True),  # asked for in a pipe
        ({"FORCE_COLOR": ""}, False, False),
        ({"NO_COLOR": "1", "FORCE_COLOR": "1"}, True, False),  # NO_COLOR first
        ({"PY_COLORS": "1", "NO_COLOR": "1"}, False, True),  # PY_COLORS before both
        ({"PY_COLORS": "0", "FORCE_COLOR": "1"}, True, False),
        ({"PY_COLORS": "yes"}, True, True),  # neither 1 nor 0: the next rules decide
    ],
)
def test_colour_follows_pytests_rule(environ: dict[str, str], tty: bool, markup: bool) -> None:
    stream = Tty() if tty else io.StringIO()
    assert should_do_markup(stream, environ) is markup


def test_pytests_own_rule_agrees_where_it_can_be_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from _pytest._io.terminalwriter import should_do_markup as pytests

    for environ in ({}, {"NO_COLOR": "1"}, {"FORCE_COLOR": "1"}, {"PY_COLORS": "0"}):
        for name in ("PY_COLORS", "NO_COLOR", "FORCE_COLOR", "TERM"):
            monkeypatch.delenv(name, raising=False)
        for name, value in environ.items():
            monkeypatch.setenv(name, value)
        for stream in (Tty(), io.StringIO()):
            assert should_do_markup(stream) is pytests(stream), (environ, stream)


def test_color_yes_and_no_overrule_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    assert Terminal(color="yes").paint("fail", "red", io.StringIO()) == "\x1b[31mfail\x1b[0m"
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR")
    assert Terminal(color="no").paint("fail", "red", Tty()) == "fail"
    assert Terminal(color="auto").paint("fail", "red", io.StringIO()) == "\x1b[31mfail\x1b[0m"


def test_levels_and_the_command_terminal() -> None:
    assert Terminal(verbosity=-1).shows(QUIET) and not Terminal(verbosity=-1).shows(0)
    assert Terminal().shows(0) and not Terminal().shows(VERBOSE)
    assert Terminal(verbosity=2).shows(VERBOSE)
    assert current() == Terminal()
    with using(Terminal(verbosity=-1)) as quiet:
        assert current() is quiet
    assert current() == Terminal()  # set back after the command
