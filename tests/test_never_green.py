"""Never green where pytest is red (issue 37, item 5), through the real CLI.

Each suite is run by plain pytest first: gpuci's exit is non-zero exactly where pytest's
is, and it names pytest's cause. A collection that pytest ends (INTERNALERROR, an
interrupt) runs no test in plain pytest, so the check runs none and its verdict fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_runner import clean_env, gpuci, spied_env, started_commands, write_files

# Two modes: another mode's results never turn the plain run's red green. No evidence:
# what these show is the exit status and the words of plain pytest's run, which no
# evidence changes (a failure here fails the same way in both modes: no suspect).
MODES = ("--modes", "suite,parallel", "--evidence-budget", "0")
# test_2.py's test depends on order; pytest's collection never reaches it here
THREE_FILES = {
    "test_1.py": "def test_a():\n    pass\n",
    "test_2.py": "STATE = []\n\ndef test_b():\n    STATE.append(1)\n",
    "test_3.py": "def test_c():\n    pass\n",
}
RAISE_ON_B = """
    def pytest_itemcollected(item):
        if item.name == "test_b":
            raise RuntimeError("boom")
"""
ENDED = {  # conftest.py -> what gpuci says of pytest's collection
    "itemcollected": (
        RAISE_ON_B,
        "pytest's collection ended with INTERNALERROR (plain pytest: exit 3, no test run):"
        " RuntimeError: boom (at conftest.py:4 in pytest_itemcollected)",
    ),
    "modifyitems": (
        "def pytest_collection_modifyitems(items):\n    raise RuntimeError('modify boom')\n",
        "INTERNALERROR (plain pytest: exit 3, no test run): RuntimeError: modify boom",
    ),
    "sessionstart": (
        "def pytest_sessionstart(session):\n    raise RuntimeError('start boom')\n",
        "INTERNALERROR (plain pytest: exit 3, no test run): RuntimeError: start boom",
    ),
    "keyboard-interrupt": (
        "def pytest_collection_modifyitems(items):\n    raise KeyboardInterrupt\n",
        "pytest's collection was interrupted (plain pytest: exit 2, no test run):"
        " KeyboardInterrupt",
    ),
    "pytest-exit-2": (
        "import pytest\n\ndef pytest_collection_modifyitems(items):\n"
        "    pytest.exit('stop', returncode=2)\n",
        "was interrupted (plain pytest: exit 2, no test run): _pytest.outcomes.Exit: stop",
    ),
}


def plain_pytest(root: Path, *args: str) -> int:
    """Plain pytest's exit status on the suite, as the CI job gpuci replaces runs it."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, "."],
        cwd=root,
        env=clean_env(),
        capture_output=True,
        check=False,
        stdin=subprocess.DEVNULL,
    ).returncode


@pytest.mark.slow
@pytest.mark.parametrize("case", list(ENDED))
def test_a_collection_pytest_ended_fails_the_check_and_runs_nothing(
    tmp_path: Path, case: str
) -> None:
    conftest, cause = ENDED[case]
    root = write_files(tmp_path, {**THREE_FILES, "conftest.py": conftest})
    plain = plain_pytest(root)
    assert plain in (2, 3)
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=root)
    assert proc.returncode == plain, proc.stdout + proc.stderr
    assert cause in proc.stdout
    assert "verdict: fail (pytest's collection" in proc.stdout
    verdict = json.loads((root / "out" / "verdict.json").read_text(encoding="utf-8"))
    assert verdict["verdict"] == "fail"
    assert [t["id"] for t in verdict["tests"]] == ["[pytest collection]"]
    assert cause in verdict["tests"][0]["message"]
    assert verdict["modes"] == {}  # as plain pytest: no test ran
    assert cause in (root / "out" / "comment.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_one_mode_of_a_collection_pytest_ended_is_not_a_pass(tmp_path: Path) -> None:
    root = write_files(tmp_path, {**THREE_FILES, "conftest.py": RAISE_ON_B})
    proc = gpuci("run", ".", "--mode", "parallel", "--out", "out", cwd=root)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # plain pytest's
    assert "INTERNALERROR (plain pytest: exit 3, no test run): RuntimeError: boom" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", [("check", *MODES), ("run", "--mode", "suite")])
def test_every_test_deselected_is_not_a_pass(tmp_path: Path, command: tuple[str, ...]) -> None:
    root = write_files(tmp_path, THREE_FILES)
    assert plain_pytest(root, "-k", "nomatch") == 5
    proc = gpuci(*command, ".", "--out", "out", "--", "-k", "nomatch", cwd=root)
    assert proc.returncode == 5, proc.stdout + proc.stderr  # plain pytest's
    assert "pytest collected 3 test(s) and deselected every one" in proc.stderr
    assert "plain pytest exits 5, no tests ran" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("files", "args", "says"),
    [
        ({"helper.py": "X = 1\n"}, (), "no tests collected"),
        (THREE_FILES, ("--no-such-option",), "unrecognized arguments: --no-such-option"),
        (THREE_FILES, ("-p", "no_such_plugin"), 'Error importing plugin "no_such_plugin"'),
    ],
    ids=["no-tests", "unknown-option", "unknown-plugin"],
)
def test_nothing_pytest_could_run_exits_as_plain_pytest(
    tmp_path: Path, files: dict[str, str], args: tuple[str, ...], says: str
) -> None:
    root = write_files(tmp_path, files)
    plain = plain_pytest(root, *args)
    assert plain in (4, 5)
    proc = gpuci("check", ".", "--out", "out", *MODES, "--", *args, cwd=root)
    assert proc.returncode == plain, proc.stdout + proc.stderr
    assert says in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("files", "args"),
    [
        ({**THREE_FILES, "test_4.py": "import no_such_module\n"}, ()),  # pytest: exit 2
        ({**THREE_FILES, "test_1.py": "def test_a():\n    assert 0\n"}, ("-x",)),  # exit 1
    ],
    ids=["collection-error", "stop-at-first-failure"],
)
def test_a_red_run_of_some_tests_fails_the_verdict(
    tmp_path: Path, files: dict[str, str], args: tuple[str, ...]
) -> None:
    root = write_files(tmp_path, files)
    plain = plain_pytest(root, *args)
    assert plain in (1, 2)
    proc = gpuci("check", ".", "--out", "out", *MODES, "--", *args, cwd=root)
    assert proc.returncode == plain, proc.stdout + proc.stderr
    assert "verdict: fail" in proc.stdout


@pytest.mark.slow
def test_pytest_exit_0_at_collection_stays_as_green_as_pytest(tmp_path: Path) -> None:
    # a suite that stops itself where it cannot run (no GPU): plain pytest exits 0
    conftest = (
        "import pytest\n\ndef pytest_collection_modifyitems(items):\n"
        "    pytest.exit('no GPU here', returncode=0)\n"
    )
    root = write_files(tmp_path, {**THREE_FILES, "conftest.py": conftest})
    assert plain_pytest(root) == 0
    env, log = spied_env(tmp_path / "spied")
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=root, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: pass" not in proc.stdout  # never a pass: nothing ran
    # the plain run and each parallel file ended as pytest ends them, once: read as they
    # ended, neither started again (nor a discovery of its own: the plain run collected)
    started = [c for c in started_commands(log) if c[1:3] == ["-m", "pytest"]]
    assert [c[3:] for c in started if "--junitxml" not in " ".join(c)] == [["."]], started
    parallel = sorted(c[-1] for c in started if "--junitxml" in " ".join(c))
    assert parallel == sorted(THREE_FILES), started


@pytest.mark.slow
@pytest.mark.parametrize("code", [0, 1])
@pytest.mark.parametrize(
    ("hook", "command"),
    [
        ("pytest_sessionstart(session)", ("check", *MODES)),
        ("pytest_sessionstart(session)", ("run", "--mode", "parallel")),
        # before its session began, pytest prints no banner, only `Exit: no GPU here`
        ("pytest_configure(config)", ("check", *MODES)),
    ],
)
def test_pytest_exit_before_collecting_exits_as_pytest_and_says_why(
    tmp_path: Path, code: int, hook: str, command: tuple[str, ...]
) -> None:
    # a conftest that stops the session at its start where it cannot run (no GPU here):
    # plain pytest runs nothing and exits with the hook's code; gpuci said "pytest could
    # not collect" and exited 3
    conftest = f"import pytest\n\ndef {hook}:\n    pytest.exit('no GPU here', returncode={code})\n"
    root = write_files(tmp_path, {**THREE_FILES, "conftest.py": conftest})
    assert plain_pytest(root) == code
    proc = gpuci(*command, ".", "--out", "out", cwd=root)
    assert proc.returncode == code, proc.stdout + proc.stderr
    why = f"pytest ended the session before collecting (plain pytest: exit {code}, no test run)"
    assert f"{why}: pytest.exit: no GPU here" in proc.stderr
    assert "could not collect" not in proc.stderr
    assert code != 0 or "error" not in proc.stderr  # pytest's own green end is no error
    if command[0] == "check":  # never a pass (nothing was checked), never red where pytest is green
        verdict = json.loads((root / "out" / "verdict.json").read_text())
        assert verdict["verdict"] == ("warn" if code == 0 else "fail"), verdict
        assert verdict["reasons"] == [f"{why}: pytest.exit: no GPU here"]


# Every test skips, as a GPU suite does on a runner without CuPy: plain pytest exits 0.
ALL_SKIPPED = {
    "conftest.py": """
        import pytest

        def pytest_collection_modifyitems(items):
            for item in items:
                if item.name != "test_c":
                    item.add_marker(pytest.mark.skip(reason="CuPy is not installed"))
    """,
    **THREE_FILES,
    "test_3.py": "import pytest\n\ndef test_c():\n    pytest.skip('no CUDA GPU')\n",
}
NOTHING_RAN = "no test ran: 3 skipped (2: CuPy is not installed; 1: no CUDA GPU)"


@pytest.mark.slow
@pytest.mark.parametrize("command", [("check", *MODES), ("run", "--mode", "parallel")])
def test_every_test_skipped_is_not_a_pass_and_says_why(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    root = write_files(tmp_path, ALL_SKIPPED)
    assert plain_pytest(root) == 0  # what gpuci does not copy
    proc = gpuci(*command, ".", "--out", "out", cwd=root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert NOTHING_RAN in proc.stdout + proc.stderr
    assert '--allow skipped, or allow = ["skipped"] in [tool.gpuci]' in proc.stderr
    if command[0] == "check":
        assert f"verdict: fail ({NOTHING_RAN})" in proc.stdout
        comment = (root / "out" / "comment.md").read_text(encoding="utf-8")
        assert NOTHING_RAN in comment


@pytest.mark.slow
@pytest.mark.parametrize("command", [("check", *MODES), ("run", "--mode", "parallel")])
def test_the_policy_may_allow_a_run_where_every_test_skipped(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    root = write_files(
        tmp_path, {**ALL_SKIPPED, "pyproject.toml": '[tool.gpuci]\nallow = ["skipped"]\n'}
    )
    proc = gpuci(*command, ".", "--out", "out", cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no test ran" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_one_test_that_ran_beside_skipped_ones_passes(tmp_path: Path) -> None:
    files = {**ALL_SKIPPED, "test_3.py": "def test_c():\n    pass\n"}
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=write_files(tmp_path, files))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: pass" in proc.stdout
