"""pytest's own cause, read from the journal or, without the journal's word, from the log."""

from __future__ import annotations

from gpuci.run.proc.endings import pytest_cause

INTERNAL_LOG = """\
INTERNALERROR> Traceback (most recent call last):
INTERNALERROR>   File "/x/conftest.py", line 3, in pytest_sessionstart
INTERNALERROR>     raise RuntimeError("early")
INTERNALERROR> RuntimeError: early
"""


def test_the_journals_internal_error_names_the_cause() -> None:
    events = [{"e": "internal-error", "message": "KeyError: 'a'", "where": "conftest.py:9 in h"}]
    assert (
        pytest_cause(3, events, "") == "pytest INTERNALERROR: KeyError: 'a' (at conftest.py:9 in h)"
    )


def test_without_the_journal_the_logs_last_internal_error_line_names_it() -> None:
    assert pytest_cause(3, [], INTERNAL_LOG) == "pytest INTERNALERROR: RuntimeError: early"


def test_a_usage_error_is_named_from_the_log() -> None:
    log = "ERROR: usage: pytest [options]\nERROR: file or directory not found: test_gone.py\n"
    assert (
        pytest_cause(4, [], log) == "pytest usage error: file or directory not found: test_gone.py"
    )


def test_other_exits_are_not_pytests_own_failures() -> None:
    for code in (0, 1, 2, 5, None):
        assert pytest_cause(code, [], INTERNAL_LOG) == ""
