"""The user's side outputs are plain pytest's: --junitxml, --cov and the cache, compared with
plain `python -m pytest` on the same tiny suite; and what gpuci cannot keep so is refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_runner import clean_env, gpuci, spied_env, started_commands, write_files

from gpuci.run.disk.side_outputs import (
    _cov_loads_here,
    _has_cov_entry_point,
    interpreter_args,
    plain_junit,
)

# its suites run with the plugins installed beside pytest (xdist, pytest-cov, pytest-randomly)
pytestmark = pytest.mark.installed_plugins

SUITE = {
    "pyproject.toml": """
        [tool.pytest.ini_options]
        pythonpath = ["."]
    """,
    "pkg/__init__.py": """
        def one(x):
            if x:
                return 1
            return 2


        def two(x):
            if x:
                return 1
            return 2
    """,
    "tests/test_a.py": """
        import pytest

        from pkg import one


        def test_a1():
            assert one(1) == 1


        def test_a2():
            assert one(0) == 3


        @pytest.mark.skip(reason="not today")
        def test_a3():
            pass
    """,
    "tests/test_b.py": """
        from pkg import two


        def test_b1():
            assert two(0) == 2


        def test_b2():
            assert two(0) == 2
    """,
}
PASSING = {
    **SUITE,
    "tests/test_a.py": "from pkg import one\n\ndef test_a1():\n    assert one(1) == 1\n",
}
CHECK = ("--modes", "suite,parallel,isolated", "--evidence-budget", "0")


def plain(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Plain pytest on the suite, as the job gpuci replaces runs it."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def cases(path: Path) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """A JUnit file's suite attributes that do not change from run to run, and its cases
    (classname, name, outcome) in order."""
    root = ET.parse(path).getroot()  # noqa: S314 (files this test wrote)
    suites = [root] if root.tag == "testsuite" else list(root)
    assert len(suites) == 1, f"{path}: {len(suites)} suites"
    counts = {k: suites[0].get(k, "") for k in ("name", "tests", "failures", "errors", "skipped")}
    found = []
    for case in suites[0].iter("testcase"):
        outcome = next((child.tag for child in case if child.tag != "properties"), "passed")
        found.append((case.get("classname", ""), case.get("name", ""), outcome))
    return counts, found


@pytest.mark.slow
@pytest.mark.parametrize(
    "junit",
    [("--junitxml=report.xml",), ("--junit-xml", "report.xml"), ("--junitxml", "report.xml")],
)
def test_junitxml_holds_what_plain_pytest_writes(tmp_path: Path, junit: tuple[str, ...]) -> None:
    plain_dir = write_files(tmp_path / "plain", SUITE)
    ours = write_files(tmp_path / "ours", SUITE)
    named = ("-o", "junit_suite_name=mine")  # the user's suite name, not gpuci's own
    plain(*junit, *named, "tests", cwd=plain_dir)
    proc = gpuci("check", "tests", "--out", "out", *CHECK, "--", *junit, *named, cwd=ours)
    assert proc.returncode == 1, proc.stderr  # test_a2 fails
    expected = cases(plain_dir / "report.xml")
    assert expected[0]["tests"] == "5"
    assert cases(ours / "report.xml") == expected
    # gpuci's own JUnit of every mode is still whole
    for mode in ("suite", "parallel"):
        mode_junit = ET.parse(ours / "out" / mode / "junit.xml")  # noqa: S314 (gpuci's)
        assert len(list(mode_junit.iter("testcase"))) == 5


def coverage_total(cwd: Path) -> str:
    """The total percentage the `.coverage` in `cwd` holds."""
    return subprocess.run(
        [sys.executable, "-m", "coverage", "report", "--format=total", "--precision=1"],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.mark.slow
@pytest.mark.parametrize("where", ["command line", "addopts"])
def test_coverage_is_what_plain_pytest_measures(tmp_path: Path, where: str) -> None:
    pytest.importorskip("pytest_cov")
    # test_c passes after test_a1 only: it fails in parallel, so test_c.py runs again in
    # isolated, after the screens: an interpreter other than the suite's that measured
    # would be the last to write .coverage
    suite = {
        **PASSING,
        "tests/test_a.py": PASSING["tests/test_a.py"] + "    pkg.seen = True\n",
        "tests/test_c.py": "import pkg\n\n\ndef test_c():\n    assert getattr(pkg, 'seen', 0)\n",
    }
    suite["tests/test_a.py"] = "import pkg\n" + suite["tests/test_a.py"]
    args: tuple[str, ...] = ("--cov=pkg", "--cov-report=term")
    if where == "addopts":
        suite["pyproject.toml"] += 'addopts = "--cov=pkg --cov-report=term"\n'
        args = ()
    plain_dir = write_files(tmp_path / "plain", suite)
    ours = write_files(tmp_path / "ours", suite)
    assert plain(*args, "tests", cwd=plain_dir).returncode == 0
    env, log = spied_env(tmp_path)
    proc = gpuci("check", "tests", "--out", "out", *CHECK, "--", *args, cwd=ours, env=env)
    assert proc.returncode == 1, proc.stderr  # test_c depends on test_a1
    assert (ours / "out" / "isolated" / "logs" / "tests" / "test_c.py.log").exists()
    expected = coverage_total(plain_dir)
    assert expected == "75.0"  # every file's tests together: 6 of 8 statements
    assert coverage_total(ours) == expected
    # whether pytest-cov loads (--no-cov for the others) was answered in gpuci's own
    # interpreter, the suite's: no interpreter was started to ask
    commands = started_commands(log)
    assert any("pytest" in c and "--no-cov" in c for c in commands), commands
    assert not any("-c" in c and "importlib.metadata" in " ".join(c) for c in commands), commands


@pytest.mark.parametrize(
    ("autoload_off", "plugins", "named", "loads"),
    [
        ("", "", False, True),
        ("1", "", False, False),
        ("1", "", True, True),
        ("1", "pytest_cov", False, True),
    ],
)
def test_gpucis_own_interpreter_answers_as_a_fresh_one_would(
    monkeypatch: pytest.MonkeyPatch, autoload_off: str, plugins: str, named: bool, loads: bool
) -> None:
    pytest.importorskip("pytest_cov")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", autoload_off)
    monkeypatch.setenv("PYTEST_PLUGINS", plugins)
    _cov_loads_here.cache_clear()
    _has_cov_entry_point.cache_clear()
    try:
        assert _cov_loads_here(named=named) is loads
        assert _has_cov_entry_point(sys.executable, named=named) is loads
    finally:  # the answers of this test's environment are no one else's
        _cov_loads_here.cache_clear()
        _has_cov_entry_point.cache_clear()


LASTFAILED = ".pytest_cache/v/cache/lastfailed"


def ran(out: Path, mode: str) -> list[str]:
    """The ids a mode ran, in order."""
    run = json.loads((out / mode / "run.json").read_text(encoding="utf-8"))
    return sorted(t["id"] for t in run["tests"])


@pytest.mark.slow
@pytest.mark.parametrize("selection", ["--lf", "--ff"])
def test_the_cache_is_read_and_written_as_plain_pytest_does(tmp_path: Path, selection: str) -> None:
    plain_dir = write_files(tmp_path / "plain", SUITE)
    # last time test_a1 failed too: it passes now, so this run takes it out of lastfailed
    last = {"tests/test_a.py::test_a1": True, "tests/test_a.py::test_a2": True}
    cache = plain_dir / LASTFAILED
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps(last), encoding="utf-8")
    ours = tmp_path / "ours"
    shutil.copytree(plain_dir, ours)
    junit = plain_dir / "plain.xml"
    # the files named one by one: pytest's --lf filters a file it was given only after
    # collection, and skips test_b.py, which holds no recorded failure
    paths = ("tests/test_a.py", "tests/test_b.py")
    plain(selection, f"--junitxml={junit}", *paths, cwd=plain_dir)
    proc = gpuci("check", *paths, "--out", "out", *CHECK, "--", selection, cwd=ours)
    assert proc.returncode == 1, proc.stderr
    expected = sorted(f"{c.replace('.', '/')}.py::{n}" for c, n, _ in cases(junit)[1])
    a_tests = ["tests/test_a.py::test_a1", "tests/test_a.py::test_a2"]
    b_tests = ["tests/test_a.py::test_a3", "tests/test_b.py::test_b1", "tests/test_b.py::test_b2"]
    assert expected == (a_tests if selection == "--lf" else a_tests + b_tests)
    for mode in ("suite", "parallel"):  # the screens run what the suite interpreter ran
        assert ran(ours / "out", mode) == expected, mode
    lastfailed = json.loads((ours / LASTFAILED).read_text(encoding="utf-8"))
    assert lastfailed == json.loads(cache.read_text(encoding="utf-8"))
    assert lastfailed == {"tests/test_a.py::test_a2": True}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "args", "named"),
    [
        (("check", "tests"), ("--html=report.html",), "--html"),
        (("check", "tests"), ("--report-log", "log.jsonl"), "--report-log"),
        (("run", "tests", "--mode", "parallel"), ("--junitxml=r.xml",), "--junitxml"),
        (("run", "tests", "--mode", "isolated"), ("--lf",), "--lf"),
    ],
)
def test_what_gpuci_cannot_write_as_plain_pytest_is_refused(
    tmp_path: Path, command: tuple[str, ...], args: tuple[str, ...], named: str
) -> None:
    suite = write_files(tmp_path, PASSING)
    proc = gpuci(*command, "--out", "out", "--", *args, cwd=suite)
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.startswith(f"gpuci: error: {named}: "), proc.stderr
    assert not (suite / "out").exists()
    assert not any(suite.glob("*.xml")) and not any(suite.glob("*.html"))


def test_other_interpreters_get_none_of_the_side_outputs() -> None:
    python = sys.executable
    user = ["--junitxml", "r.xml", "--lf", "--lfnf=none", "--basetemp=t", "-k", "x", "--cov=pkg"]
    cache = Path("/o/cache/test_a.py")
    other = interpreter_args(python, user, cache=cache)
    assert other[:4] == ["-k", "x", "--cov=pkg", "--basetemp=/o/cache/test_a.py-basetemp"]
    assert other[4:6] == ["-o", f"cache_dir={cache}"]
    assert plain_junit(user) == Path.cwd() / "r.xml"
    assert plain_junit(["--junit-xml=/a/b.xml", "--junitxml=/c.xml"]) == Path("/c.xml")
    assert plain_junit(["-k", "junitxml"]) is None


@pytest.mark.slow
def test_a_printed_command_writes_none_of_the_side_outputs(tmp_path: Path) -> None:
    # run as printed, a reproduce command must not overwrite the plain run's JUnit file
    # nor let pytest's cache choose what it runs: the evidence run behind it had neither
    root = write_files(tmp_path / "suite", SUITE)
    sides = ("--junitxml=report.xml", "--ff", "--basetemp=bt")
    proc = gpuci(
        "check", "tests", "--out", "out", "--modes", "suite,isolated", "--", *sides, cwd=root
    )
    assert proc.returncode == 1, proc.stderr
    verdict = json.loads((root / "out" / "verdict.json").read_text(encoding="utf-8"))
    failing = next(t for t in verdict["tests"] if t["category"] == "failed")
    command = failing["reproduce"]
    assert not any(side in command for side in sides), command
    before = (root / "report.xml").read_bytes()
    shown = subprocess.run(
        ["bash", "-c", command], cwd=root, capture_output=True, text=True, check=False
    )
    assert shown.returncode == 1 and "1 failed" in shown.stdout, shown.stdout
    assert (root / "report.xml").read_bytes() == before
