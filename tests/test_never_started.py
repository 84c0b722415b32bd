"""An evidence run the time limit cut before its first test asked nothing: it runs once
more, as it was (`gpuci.evidence.probe`). Counted as a pass or a failure, a start-up that
a loaded machine made slow turned a culprit's confirmation into "then not" (flaky) and a
pair run into "not reproduced" (on 2 busy cores the polluted example's pool victim was
`passed`, "in 8 strict runs")."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from cli_runner import write_files

from gpuci.evidence.probe import Prober
from gpuci.model import Outcome
from gpuci.run.proc import interpreter
from gpuci.run.proc.discover import child_env
from gpuci.run.proc.interpreter import Interpreters
from gpuci.run.proc.supervisor import Supervisor

# the first interpreter to import it stalls in its start-up, past the time limit
STALLS_ONCE = """
import os, time

try:
    os.close(os.open(os.path.join(os.path.dirname(__file__), "stalled"), os.O_CREAT | os.O_EXCL))
except FileExistsError:
    pass
else:
    time.sleep(600)
"""
# a start-up on two busy cores is no stall: the limit leaves it room (the second run's); the
# start-up floor, longer, would only make the stalled run wait longer for its cut
LIMIT_S = 10.0


@pytest.mark.slow
def test_a_run_cut_before_its_first_test_runs_once_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "conftest.py": STALLS_ONCE,
        "test_a.py": "def test_a():\n    assert 1 + 1 == 2\n",
    }
    root = write_files(tmp_path / "suite", files)
    monkeypatch.chdir(root)
    monkeypatch.setattr(interpreter, "START_FLOOR_S", 0.0)
    interpreters = Interpreters(
        out=tmp_path / "out",
        python=sys.executable,
        pytest_args=(),
        timeout=LIMIT_S,
        environ=child_env(os.environ),
        clock_zero=time.monotonic(),
        supervisor=Supervisor(),
    )
    prober = Prober(interpreters, root, None, None)
    try:
        ran = prober.run(["test_a.py::test_a"], phase="alone", label="alone")
    finally:
        prober.close()
    assert (root / "stalled").exists()  # the first one stalled, and was cut
    assert ran.outcome("test_a.py::test_a") is Outcome.PASSED
    assert prober.account.runs == 2  # both interpreters cost, and count
