"""gpuci.run.sched.junit: a JUnit file rebuilt from the journal (no pytest JUnit of the
interpreter's) has the cases pytest's own JUnit has, each of the same kind."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from xml.etree import ElementTree

from cli_runner import clean_env

from gpuci.model import Interpreter
from gpuci.run.proc.journal import JournalState
from gpuci.run.proc.launch import Attempt
from gpuci.run.sched.junit import write_file_junit

SUITE = {
    "test_kinds.py": """
        import pytest

        @pytest.fixture
        def broken_setup():
            raise RuntimeError("setup fails")

        @pytest.fixture
        def broken_teardown():
            yield
            raise RuntimeError("teardown fails")

        def test_passes():
            pass

        def test_fails():
            assert False

        def test_setup_error(broken_setup):
            pass

        def test_passes_then_teardown_errors(broken_teardown):
            pass

        @pytest.mark.xfail(reason="known")
        def test_xfails():
            assert False

        @pytest.mark.xfail(reason="fixed")
        def test_xpasses():
            pass

        @pytest.mark.xfail(strict=True, reason="strictly")
        def test_xpasses_strictly():
            pass
    """,
    "test_module_skip.py": """
        import pytest

        pytest.skip("not here", allow_module_level=True)
    """,
    "test_broken.py": "import no_such_module_for_gpuci\n",
}


def _kinds(path: Path) -> dict[tuple[str, str], str]:
    """(classname, name) -> the case's kind: its result element's tag, or `passed`."""
    root = ElementTree.parse(path).getroot()  # noqa: S314 -- pytest's and ours
    return {
        (c.get("classname", ""), c.get("name", "")): next((r.tag for r in c), "passed")
        for c in root.iter("testcase")
    }


def test_a_junit_rebuilt_from_the_journal_has_pytests_cases_and_kinds(tmp_path: Path) -> None:
    for name, text in SUITE.items():
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    journal, plain = tmp_path / "journal.jsonl", tmp_path / "plain.xml"
    plugin = ("-p", "gpuci.pytest_plugin", "-p", "no:cacheprovider")
    keep_going = ("--continue-on-collection-errors", f"--junitxml={plain}", ".")
    subprocess.run(
        [sys.executable, "-m", "pytest", *plugin, *keep_going],
        cwd=tmp_path,
        env=clean_env() | {"GPUCI_JOURNAL": str(journal)},
        capture_output=True,
        check=False,
    )
    events = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]
    state = JournalState.from_events(events)
    attempt = Attempt(
        interpreter=Interpreter(exit_code=1, start=0.0, end=1.0, log="x.log"),
        results=state.results(),
        finished=list(state.finished.values()),
    )
    rebuilt = tmp_path / "rebuilt.xml"
    write_file_junit(rebuilt, "test_kinds.py", [attempt], attempt.results)
    expected = _kinds(plain)
    # pytest writes a test's teardown error beside its pass as one case: an error
    assert expected[("test_kinds", "test_passes_then_teardown_errors")] == "error"
    assert expected[("", "test_module_skip")] == "skipped"
    assert expected[("", "test_broken")] == "error"
    assert _kinds(rebuilt) == expected
