"""tests/conftest.py's choice of plugins for the interpreters a test starts: the plugins
installed beside pytest load only in those of a test marked `installed_plugins`;
pytest-run-parallel alone, by name, in those of a test marked `threads_plugin`, NumPy
hidden; whichever
environment the test hands gpuci (tests/cli_runner.py's clean_env keeps the choice while it
drops pytest's other settings)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.cli_runner import AUTOLOAD_OFF, clean_env, needs_run_parallel


def test_an_unmarked_tests_interpreters_load_no_installed_plugin() -> None:
    assert clean_env()[AUTOLOAD_OFF] == "1"
    assert clean_env(dict(os.environ))[AUTOLOAD_OFF] == "1"
    assert "PYTEST_PLUGINS" not in clean_env()


@needs_run_parallel
def test_a_threads_tests_interpreters_load_pytest_run_parallel_and_no_other() -> None:
    env = clean_env()
    assert (env[AUTOLOAD_OFF], env["PYTEST_PLUGINS"]) == ("1", "pytest_run_parallel.plugin")
    # as its interpreters find it: pytest offers its option, and none of xdist's or cov's
    shown = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert "--parallel-threads" in shown.stdout, shown.stdout + shown.stderr
    assert "--numprocesses" not in shown.stdout and "--cov" not in shown.stdout
    # nor NumPy, which pytest-run-parallel imports where it can (no suite here uses it)
    numpy = subprocess.run(
        [sys.executable, "-c", "import numpy"], env=env, capture_output=True, text=True, check=False
    )
    assert numpy.returncode == 1 and "NumPy is hidden" in numpy.stderr, numpy.stderr


@pytest.mark.installed_plugins
def test_a_marked_tests_interpreters_load_the_installed_plugins() -> None:
    assert AUTOLOAD_OFF not in clean_env()
    assert AUTOLOAD_OFF not in os.environ  # also where the developer's shell set it


def test_pytests_other_settings_are_still_dropped() -> None:
    env = clean_env({"PYTEST_ADDOPTS": "-x", "PYTEST_XDIST_WORKER": "gw0", AUTOLOAD_OFF: "1"})
    assert env == {AUTOLOAD_OFF: "1"}
