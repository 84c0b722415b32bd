"""The smaller untruths of issue 27 (item 9), through the real CLI.

Totals as pytest's own summary line counts them (xfailed, xpassed, errors), the evidence
saying a second round of alone-runs as a second round, and a lazily inferred isolated
outcome said in words.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.cli_runner import clean_env, gpuci

MODES = ("--modes", "suite,parallel,isolated")
# every word pytest's summary line has for a test, once or twice
KINDS = """
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

    def test_setup_error(broken_setup):
        pass

    def test_fails_and_teardown_errors(broken_teardown):
        assert False

    @pytest.mark.xfail(reason="known")
    def test_xfails():
        assert False

    @pytest.mark.xfail(reason="fixed meanwhile")
    def test_xpasses():
        pass

    def test_skips():
        pytest.skip("not here")
"""
_COUNT = re.compile(r"(\d+) ([a-z-]+)")


def counts(line: str) -> dict[str, int]:
    """`1 failed, 2 errors in 0.1s` -> {"failed": 1, "error": 2}."""
    found = {word: int(n) for n, word in _COUNT.findall(line.rsplit(" in ", 1)[0])}
    if "errors" in found:
        found["error"] = found.pop("errors")
    return found


@pytest.mark.slow
def test_totals_agree_with_pytests_own_summary_line(tmp_path: Path) -> None:
    (tmp_path / "test_kinds.py").write_text(textwrap.dedent(KINDS), encoding="utf-8")
    plain = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_kinds.py"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    expected = counts(plain.stdout.strip().splitlines()[-1])
    assert expected == {
        "passed": 1,
        "failed": 1,
        "skipped": 1,
        "xfailed": 1,
        "xpassed": 1,
        "error": 2,
    }
    proc = gpuci("check", ".", "--out", "out", *MODES, "--reruns", "0", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    for mode in ("suite", "parallel"):
        done = re.compile(rf"gpuci: {mode}: .* in [0-9.]+s$")  # the mode's last line
        line = next(x for x in proc.stderr.splitlines() if done.match(x))
        assert counts(line.removeprefix(f"gpuci: {mode}: ")) == expected, line
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text(encoding="utf-8"))
    assert counts(verdict["modes"]["suite"]["counts"]) == expected
    assert "skipped: known" not in proc.stderr  # an xfail's reason is not a skip's


@pytest.mark.slow
def test_a_second_round_of_alone_runs_says_so(tmp_path: Path) -> None:
    # not first in its file: isolated's run does not count as alone, so two rounds are due
    test = "def test_first():\n    pass\n\ndef test_x():\n    assert False\n"
    (tmp_path / "test_x.py").write_text(test, encoding="utf-8")
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    rounds = [x for x in proc.stderr.splitlines() if "test(s) alone" in x]
    assert [x.split(",")[0] for x in rounds] == [
        "gpuci: evidence: running 1 test(s) alone",
        "gpuci: evidence: running 1 test(s) alone again",
    ]


@pytest.mark.slow
def test_an_inferred_isolated_outcome_is_said_in_words(tmp_path: Path) -> None:
    files = {
        "test_a_polluter.py": "import os\n\ndef test_pollute():\n    os.environ['D'] = '1'\n",
        "test_b_victim.py": "import os\n\ndef test_victim():\n    assert 'D' not in os.environ\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "inferred=" not in proc.stdout
    said = "(isolated not run for it: taken from its file's pass in parallel)"
    assert said in proc.stdout, proc.stdout


# what plain pytest reports beside a test's pass or failure, each of its kind: errors in
# setup and teardown (a passing test's too: pytest counts it passed and error), a
# class-scoped fixture's error (each of its tests), a strict xpass (a failure), files that
# skip themselves (a module-level skip, importorskip: each one skip, no test of its own;
# collected after a file with tests, as issue 53 item 3 mends the pool's crash otherwise)
EVERY_WORD = {
    "tests/test_kinds.py": KINDS
    + """
    def test_passes_then_teardown_errors(broken_teardown):
        pass

    @pytest.mark.xfail(strict=True, reason="strictly")
    def test_xpasses_strictly():
        pass

    class TestShared:
        @pytest.fixture(scope="class")
        def shared(self):
            raise ValueError("class fixture fails")

        def test_one(self, shared):
            pass

        def test_two(self, shared):
            pass
    """,
    "tests/test_z_module_skip.py": """
        import pytest

        pytest.skip("no frobnicator here", allow_module_level=True)

        def test_never():
            pass
    """,
    "tests/test_z_importorskip.py": """
        import pytest

        pytest.importorskip("no_such_module_for_gpuci")

        def test_never():
            pass
    """,
}


@pytest.mark.slow
def test_every_file_and_outcome_plain_pytest_reports_is_in_the_verdict(tmp_path: Path) -> None:
    for name, text in EVERY_WORD.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    junit = tmp_path / "plain.xml"
    plain = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests",
            f"--junitxml={junit}",
        ],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    expected = counts(plain.stdout.strip().splitlines()[-1])
    expected.pop("warning", None)
    expected.pop("warnings", None)
    assert expected == {
        "passed": 2,
        "failed": 2,
        "skipped": 3,
        "xfailed": 1,
        "xpassed": 1,
        "error": 5,
    }, plain.stdout
    proc = gpuci("check", "tests", "--out", "out", *MODES, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    said = next(x for x in proc.stdout.splitlines() if x.startswith("pytest (suite): "))
    assert counts(said.removeprefix("pytest (suite): ")) == expected, said
    assert said in (tmp_path / "out" / "comment.md").read_text(encoding="utf-8")
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text(encoding="utf-8"))
    assert counts(verdict["modes"]["suite"]["counts"]) == expected
    tests = {t["id"]: t for t in verdict["tests"]}
    # every case of plain pytest's JUnit is a test of the verdict, of the same kind (pytest
    # writes a failure and its teardown's error as two cases, a pass and its error as one)
    cases = ElementTree.parse(junit).getroot().iter("testcase")  # noqa: S314 -- pytest's
    kinds = Counter(next((c.tag for c in case), "passed") for case in cases)
    words = [
        tuple(t.get("pytest", {}).get("suite", ())) or (t["outcomes"]["suite"],)
        for t in tests.values()
    ]
    assert kinds == Counter(
        {
            "error": sum("error" in w for w in words),
            "failure": sum("failed" in w for w in words),
            "skipped": sum(w[0] in ("skipped", "xfailed") for w in words),
            "passed": sum(w in (("passed",), ("xpassed",)) for w in words),
        }
    ), words
    assert len(words) == 12, sorted(tests)
    for file, reason in [
        ("tests/test_z_module_skip.py", "no frobnicator here"),
        ("tests/test_z_importorskip.py", "could not import 'no_such_module_for_gpuci'"),
    ]:
        assert tests[file]["category"] == "skipped", tests[file]
        assert tests[file]["message"].startswith(reason), tests[file]
    setup = tests["tests/test_kinds.py::test_setup_error"]
    assert setup["category"] == "failed" and setup["pytest"]["suite"] == ["error"], setup
    teardown = tests["tests/test_kinds.py::test_passes_then_teardown_errors"]
    assert teardown["pytest"]["suite"] == ["passed", "error"], teardown
    assert tests["tests/test_kinds.py::TestShared::test_two"]["pytest"]["suite"] == ["error"]
    assert tests["tests/test_kinds.py::test_xfails"]["pytest"]["suite"] == ["xfailed"]
    strict = tests["tests/test_kinds.py::test_xpasses_strictly"]
    assert strict["category"] == "failed" and "pytest" not in strict, strict
    # the verdict's reason counts them in pytest's words too
    assert "6 failed tests (2 failed, 1 passed, 5 errors)" in verdict["reasons"], verdict["reasons"]
