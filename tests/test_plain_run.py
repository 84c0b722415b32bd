"""The plain run is the user's pytest (issue 53), through the real CLI: each suite is run by
plain pytest first, then checked; the check's exit status is at least plain pytest's (its
2-5 as themselves, never 0 after its 1), and the user's --junitxml holds what plain pytest
writes. What a test sees in the other interpreters is what it sees in plain pytest."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import clean_env, gpuci, write_files
from test_side_outputs import cases

from gpuci.model import Mode, Verdict
from gpuci.run.disk.outdir import replace_earlier
from gpuci.run.proc.launch import private_cache
from gpuci.verdict.plain_run import PlainRun, at_least_as_red, check_exit_code, pytest_words

# its suites run with the plugins installed beside pytest (xdist, pytest-cov, pytest-randomly)
pytestmark = pytest.mark.installed_plugins

CHECK = ("--modes", "suite,parallel", "--evidence-budget", "0")
PASSING = {"test_a.py": "def test_a():\n    pass\n", "test_b.py": "def test_b():\n    pass\n"}
FAILING_FIRST = {
    "test_a.py": "def test_a1():\n    assert 0\n\ndef test_a2():\n    pass\n",
    "test_b.py": "def test_b():\n    pass\n",
}
SESSION_SAYS = (
    "import pytest\n\n@pytest.hookimpl(trylast=True)\n"
    "def pytest_sessionfinish(session):\n    session.exitstatus = {code}\n"
)
# name -> (files, pytest arguments); each is run by plain pytest and by gpuci check
CASES = {
    # a collection error stops plain pytest: exit 2, nothing run
    "same-basename": (
        {"a/test_same.py": PASSING["test_a.py"], "b/test_same.py": PASSING["test_b.py"]},
        (),
    ),
    "strict-markers": (
        {**PASSING, "test_c.py": "import pytest\n\n@pytest.mark.nosuch\ndef test_c():\n    pass\n"},
        ("--strict-markers",),
    ),
    "warning-at-import": (
        {**PASSING, "test_c.py": "import warnings\nwarnings.warn('old', UserWarning)\n"},
        ("-W", "error::UserWarning"),
    ),
    # the plain run stops at its first failure: exit 1, the rest unrun there
    "exitfirst": (FAILING_FIRST, ("-x",)),
    "maxfail": (FAILING_FIRST, ("--maxfail=1",)),
    # every test passes, and the session fails all the same
    "sessionfinish-1": ({**PASSING, "conftest.py": SESSION_SAYS.format(code=1)}, ()),
    "sessionfinish-4": ({**PASSING, "conftest.py": SESSION_SAYS.format(code=4)}, ()),
    # a file skipped at import first in collection order (it crashed the check)
    "skipped-first": (
        {
            "test_a.py": "import pytest\npytest.skip('not here', allow_module_level=True)\n",
            "test_b.py": PASSING["test_b.py"],
        },
        (),
    ),
}


def plain_pytest(root: Path, *args: str, env: dict[str, str] | None = None) -> int:
    """Plain pytest's exit status on the suite, its JUnit file in plain.xml."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--junitxml=plain.xml", *args, "."],
        cwd=root,
        env=env or clean_env(),
        capture_output=True,
        check=False,
        stdin=subprocess.DEVNULL,
    ).returncode


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_check_exits_as_plain_pytest_and_writes_its_junit(tmp_path: Path, case: str) -> None:
    files, args = CASES[case]
    root = write_files(tmp_path, files)
    plain = plain_pytest(root, *args)
    junit = "--junitxml=gpuci.xml"
    proc = gpuci("check", ".", "--out", "out", *CHECK, "--", junit, *args, cwd=root)
    output = proc.stdout + proc.stderr
    if plain in (2, 3, 4, 5):
        assert proc.returncode == plain, output
        assert f"verdict: fail (plain pytest exited {plain} " in proc.stdout, output
    elif plain == 1:
        assert proc.returncode == 1, output
    else:
        assert proc.returncode == 0, output
    assert "Traceback" not in proc.stderr, output
    # the user's JUnit file is plain pytest's: the same cases, the same counts
    assert cases(root / "gpuci.xml") == cases(root / "plain.xml")


@pytest.mark.slow
def test_the_suite_interpreter_is_the_users_command(tmp_path: Path) -> None:
    root = write_files(tmp_path, PASSING)
    proc = gpuci("check", ".", "--out", "out", *CHECK, "--", "-q", "-x", cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = (root / "out" / "suite" / "logs" / "suite.log").read_text(encoding="utf-8")
    assert log.splitlines()[0].endswith(f": {sys.executable} -m pytest -q -x .")
    assert "generated xml file" not in log  # gpuci's own JUnit file is written silently
    parallel = (root / "out" / "parallel" / "logs" / "test_a.py.log").read_text(encoding="utf-8")
    command = parallel.splitlines()[0]
    assert " -q " in command and " -x" not in command  # -x judges the plain run only


@pytest.mark.slow
def test_an_out_folder_beside_the_suite_keeps_its_passes_passed(tmp_path: Path) -> None:
    # `--out ../out`: every other interpreter's pytest cache lay under `suite/../out`, a
    # path whose every key pytest refuses (it climbs): each ended with INTERNALERROR, and
    # its tests, which plain pytest passes, failed the check
    root = write_files(tmp_path / "suite", PASSING)
    assert plain_pytest(root) == 0
    proc = gpuci("check", ".", "--out", "../out", *CHECK, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: pass" in proc.stdout
    run = json.loads((tmp_path / "out" / "parallel" / "run.json").read_text(encoding="utf-8"))
    assert [t["outcome"] for t in run["tests"]] == ["passed", "passed"]


@pytest.mark.slow
def test_coverage_below_its_floor_fails_the_check_in_pytest_cov_words(tmp_path: Path) -> None:
    pytest.importorskip("pytest_cov")
    files = {
        "pytest.ini": "[pytest]\npythonpath = .\n",
        "pkg/__init__.py": "def f(x):\n    if x:\n        return 1\n    return 2\n",
        "test_f.py": "from pkg import f\n\ndef test_f():\n    assert f(1) == 1\n",
    }
    root = write_files(tmp_path, files)
    args = ("--cov=pkg", "--cov-fail-under=90")
    assert plain_pytest(root, *args) == 1
    proc = gpuci("check", ".", "--out", "out", *CHECK, "--", *args, cwd=root)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # it said `verdict: pass`, exit 0
    assert "verdict: fail (plain pytest exited 1 (tests failed, or the session did):" in proc.stdout
    assert "Required test coverage of 90% not reached" in proc.stdout
    verdict = json.loads((root / "out" / "verdict.json").read_text(encoding="utf-8"))
    assert verdict["verdict"] == "fail"
    assert verdict["reasons"][0].startswith("plain pytest exited 1")


USERS_PLUGIN = "import pytest\n\n@pytest.fixture\ndef users_fixture():\n    return 42\n"
CACHE_AND_ENV = """
import os


def test_cache_and_plugins(request):
    request.config.cache.set("gpuci/probe", [1, 2])
    assert request.config.cache.get("gpuci/probe", None) == [1, 2]
    assert os.environ.get("PYTEST_PLUGINS") == "users_plugin"
    assert "gpuci.pytest_plugin" not in " ".join(request.config.invocation_params.args)


def test_users_plugin(users_fixture):
    assert users_fixture == 42
"""


@pytest.mark.slow
@pytest.mark.parametrize("autoload", ["on", "off"])
def test_a_test_sees_the_cache_and_the_users_plugins_in_every_interpreter(
    tmp_path: Path, autoload: str
) -> None:
    files = {
        "users_plugin.py": USERS_PLUGIN,
        "test_env.py": CACHE_AND_ENV,
    }
    root = write_files(tmp_path, files)
    env = {**clean_env(), "PYTEST_PLUGINS": "users_plugin", "PYTHONPATH": str(root)}
    if autoload == "off":
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    assert plain_pytest(root, env=env) == 0
    # as is: cli_runner's gpuci() takes PYTEST_* variables out of the environment
    proc = subprocess.run(
        [sys.executable, "-m", "gpuci", "check", ".", "--out", "out", *CHECK],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: pass" in proc.stdout
    for mode in ("suite", "parallel"):  # the journal of each: gpuci's plugin was loaded
        run = json.loads((root / "out" / mode / "run.json").read_text(encoding="utf-8"))
        assert {t["outcome"] for t in run["tests"]} == {"passed"}, mode
    # each interpreter but the plain run's wrote its own cache, not the user's
    assert (root / "out" / ".gpuci" / "cache" / "parallel" / "test_env.py").is_dir()


def test_an_interpreters_own_cache_leaves_no_mode_folder_behind(tmp_path: Path) -> None:
    # an isolated interpreter started ahead wrote its cache into OUT/isolated before the
    # isolated pass ran; the check then read that folder as the pass's results, found no
    # run.json and ended with exit 3 (structlog 26.1.0)
    for mode in Mode:
        cache = private_cache(tmp_path / mode.value, "tests/test_a.py")
        assert tmp_path / mode.value not in cache.parents, cache
        cache.mkdir(parents=True)
    assert not any((tmp_path / mode.value).exists() for mode in Mode)
    # a new check's interpreters start with no cache an earlier check left
    replace_earlier(tmp_path, "run-2")
    assert not private_cache(tmp_path / "parallel", "tests/test_a.py").exists()


RANDOMLY_SITE = os.environ.get("GPUCI_RANDOMLY_SITE", "")


@pytest.mark.slow
@pytest.mark.skipif(
    not RANDOMLY_SITE and os.environ.get("CI") != "true",
    reason="pytest-randomly is not installed apart (nox -s tests: GPUCI_RANDOMLY_SITE)",
)
def test_the_plain_runs_seed_is_every_interpreters_and_in_every_command(tmp_path: Path) -> None:
    files = {**PASSING, "test_c.py": "def test_c():\n    assert 0\n"}
    root = write_files(tmp_path, files)
    env = {**clean_env(), "PYTHONPATH": str(Path(RANDOMLY_SITE).resolve())}
    proc = gpuci("check", ".", "--out", "out", "--modes", "suite,parallel", cwd=root, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    logs = root / "out"
    suite = (logs / "suite" / "logs" / "suite.log").read_text(encoding="utf-8")
    seed = re.search(r"Using --randomly-seed=(\d+)", suite)
    assert seed is not None, suite
    assert "--randomly-seed" not in suite.splitlines()[0]  # the plain run drew it itself
    for log in [*(logs / "parallel" / "logs").glob("*.log"), *(logs / "evidence").rglob("*.log")]:
        text = log.read_text(encoding="utf-8")
        assert f"-p randomly --randomly-seed={seed[1]} " in text.splitlines()[0], log
        assert f"Using --randomly-seed={seed[1]}" in text, log
    verdict = json.loads((root / "out" / "verdict.json").read_text(encoding="utf-8"))
    failing = next(t for t in verdict["tests"] if t["category"] == "failed")
    assert f"-p randomly --randomly-seed={seed[1]} " in failing["reproduce"]


INTERRUPTED_LOG = """=== gpuci: interpreter 1: python -m pytest .
==================================== ERRORS ====================================
E   import file mismatch:
!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!
=============================== 1 error in 0.05s ===============================
"""
NOT_FOUND = "ERROR: file or directory not found: nowhere"
# what a library's exit hook printed after pytest's summary (a CuPy suite's, on an H100)
AFTER_THE_SUMMARY = """=============== 7 failed, 19 passed in 7.87s ===============
Error in sys.excepthook:

Original exception was:
"""
INTERNAL_LOG = """INTERNALERROR> Traceback (most recent call last):
INTERNALERROR>   File "conftest.py", line 2, in pytest_collection_modifyitems
INTERNALERROR> RuntimeError: boom
"""


@pytest.mark.parametrize(
    ("log", "words"),
    [
        (INTERRUPTED_LOG, "Interrupted: 1 error during collection; 1 error in 0.05s"),
        (INTERNAL_LOG, "RuntimeError: boom"),
        ("..\n2 passed in 0.01s\n", "2 passed in 0.01s"),  # -q: no frame
        (
            "ERROR: file or directory not found: nowhere\n\n",
            "ERROR: file or directory not found: nowhere",
        ),
        ("", ""),
        (AFTER_THE_SUMMARY, "7 failed, 19 passed in 7.87s"),
        (
            "F.\n1 failed, 1 passed in 0.02s\nException ignored in atexit callback\n",
            "1 failed, 1 passed in 0.02s",
        ),
    ],
    ids=[
        "interrupted",
        "internal-error",
        "quiet",
        "usage",
        "empty",
        "stderr-after",
        "quiet-stderr-after",
    ],
)
def test_pytest_words_are_the_lines_it_ended_with(log: str, words: str) -> None:
    assert pytest_words(log) == words


@pytest.mark.parametrize(
    ("plain", "verdict_code", "code"),
    [
        (None, 0, 0),
        (None, 1, 1),
        (1, 0, 1),  # --cov-fail-under, a plugin: never 0
        (1, 1, 1),
        (2, 0, 2),
        (2, 1, 2),
        (3, 1, 3),
        (4, 0, 4),
        (5, 0, 5),
    ],
)
def test_the_check_exits_at_least_as_the_plain_run(
    plain: int | None, verdict_code: int, code: int
) -> None:
    run = PlainRun(plain, "") if plain is not None else None
    assert check_exit_code(verdict_code, run) == code


@pytest.mark.parametrize(
    ("run", "verdict"),
    [
        (PlainRun(1, "FAIL Required test coverage of 90% not reached."), "fail"),
        (PlainRun(2, "Interrupted: 1 error during collection"), "fail"),
        # its tests failed: the diff judged them (here a category the policy allows)
        (PlainRun(1, "1 failed", tests_failed=True), "warn"),
    ],
)
def test_the_verdict_says_the_plain_runs_exit_first(run: PlainRun, verdict: str) -> None:
    judged = at_least_as_red(Verdict(verdict="warn", reasons=("1 flaky",)), run)
    assert judged.verdict == verdict
    said = () if run.judged_by_diff else (run.reason(),)  # the diff's reasons say it
    assert judged.reasons == (*said, "1 flaky")
