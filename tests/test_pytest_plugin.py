"""The child-side journal plugin, in real pytest subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from gpuci.discover import child_env

SOURCE = """
import pytest

def test_pass():
    pass

def test_fail():
    assert 1 == 2, "one is not two"

@pytest.mark.skip(reason="not today")
def test_skip():
    pass

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_setup_error(broken):
    pass

@pytest.mark.gpu_serial
def test_serial():
    pass
"""


def run_pytest(tmp_path: Path, only: list[str] | None = None) -> list[dict[str, Any]]:
    """Run pytest with the plugin on SOURCE; return the journal's events."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "test_x.py").write_text(textwrap.dedent(SOURCE), encoding="utf-8")
    (tmp_path / "test_broken.py").write_text("import nope_nope\n", encoding="utf-8")
    journal = tmp_path / "journal.jsonl"
    env = child_env(os.environ)
    env["GPUCI_JOURNAL"] = str(journal)
    if only is not None:
        (tmp_path / "only.txt").write_text("\n".join(only) + "\n", encoding="utf-8")
        env["GPUCI_ONLY"] = str(tmp_path / "only.txt")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "gpuci.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "--continue-on-collection-errors",
            "--strict-markers",
            ".",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        check=False,
        timeout=120,
    )
    return [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]


def test_every_event_is_journaled(tmp_path: Path) -> None:
    events = run_pytest(tmp_path)
    kinds = [e["e"] for e in events]
    assert kinds[0] == "collect-error"
    assert kinds[1] == "collected"
    assert kinds[-1] == "end"
    assert events[-1]["exitstatus"] == 1
    collected = events[1]
    assert collected["rootdir"] == str(tmp_path)
    assert collected["serial"] == ["test_x.py::test_serial"]
    assert len(collected["ids"]) == 6
    finished = {e["id"]: e for e in events if e["e"] == "finish"}
    starts = [e["id"] for e in events if e["e"] == "start"]
    assert starts == collected["ids"]
    assert finished["test_x.py::test_pass"]["outcome"] == "passed"
    assert finished["test_x.py::test_fail"]["outcome"] == "failed"
    assert "one is not two" in finished["test_x.py::test_fail"]["message"]
    assert finished["test_x.py::test_skip"] == {
        "e": "finish",
        "id": "test_x.py::test_skip",
        "outcome": "skipped",
        "duration": finished["test_x.py::test_skip"]["duration"],
        "message": "not today",
    }
    assert finished["test_x.py::test_xfail"]["outcome"] == "skipped"
    error = finished["test_x.py::test_setup_error"]
    assert error["outcome"] == "failed"
    assert error["message"].startswith("error in setup: RuntimeError: fixture broke")
    assert "nope_nope" in events[0]["message"]


def test_only_runs_the_named_tests(tmp_path: Path) -> None:
    events = run_pytest(tmp_path, only=["test_x.py::test_serial", "test_x.py::test_pass"])
    collected = next(e for e in events if e["e"] == "collected")
    # collection order is kept, whatever the order of the list
    assert collected["ids"] == ["test_x.py::test_pass", "test_x.py::test_serial"]
    assert [e["id"] for e in events if e["e"] == "finish"] == collected["ids"]
