"""tests/conftest.py's QuickLaneGuard: a test not marked `slow` that uses more than
QUICK_CPU_S of CPU, its children's included, fails and says to mark it. Each burner here
runs until it has used that much CPU (never a number of wall seconds), so what the guard
sees does not depend on the machine's load."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import QUICK_CPU_S

SUITE = f"""
    import subprocess
    import sys
    import time

    import pytest

    BURN = "import time\\nwhile time.process_time() < {QUICK_CPU_S + 0.5}: pass"


    def test_burns_cpu_itself():
        end = time.process_time() + {QUICK_CPU_S + 0.5}
        while time.process_time() < end:
            pass


    def test_its_child_burns_cpu():
        subprocess.run([sys.executable, "-c", BURN], check=True)


    @pytest.mark.slow
    def test_marked_slow_burns_cpu():
        subprocess.run([sys.executable, "-c", BURN], check=True)


    def test_light():
        assert sum(range(1000)) == 499500
"""


@pytest.mark.slow
def test_a_test_not_marked_slow_that_uses_seconds_of_cpu_fails(tmp_path: Path) -> None:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_burn.py").write_text(textwrap.dedent(SUITE), encoding="utf-8")
    ini = "[pytest]\nmarkers =\n    slow: takes more than a few seconds\n    threads_plugin: x\n"
    (tmp_path / "pytest.ini").write_text(ini, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "test_burn.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stdout.splitlines() if line.startswith("ERROR ")]
    assert sorted(line.split()[1] for line in errors) == [
        "test_burn.py::test_burns_cpu_itself",
        "test_burn.py::test_its_child_burns_cpu",
    ]
    # pytest repeats each message in the short summary, whole under CI=true: count the
    # report sections above it
    sections = proc.stdout.split("short test summary info")[0]
    assert sections.count("s of CPU (its children's included), more than") == 2
    assert "more than a quick test's 2s: mark it @pytest.mark.slow" in proc.stdout
    assert "4 passed, 2 errors" in proc.stdout  # the errors are at teardown: all four ran
