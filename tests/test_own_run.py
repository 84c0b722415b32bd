"""tests/conftest.py's spread of gpuci's own tests (`nox -s tests`: `-n auto --dist
loadgroup`): the tests of a file with a module's fixture run on one worker, where it is
built once; the others run wherever a worker is free, the slow ones first; each file gets
one line, with its tests, seconds and CPU seconds, however its tests were spread."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# its suites run with the plugins installed beside pytest (xdist, pytest-cov, pytest-randomly)
pytestmark = pytest.mark.installed_plugins

# each test writes which worker ran it, and the module's fixture, where it was built
SHARED = """
    import os
    from pathlib import Path

    import pytest

    HERE = Path(__file__).parent


    def record(name):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "none")
        with (HERE / "ran.txt").open("a") as f:
            f.write(f"{name} {worker}\\n")


    @pytest.fixture(scope="module")
    def built():
        record("built")
        return 42


    def test_shares(built):
        record("shares")


    def test_also_in_the_file(built):
        record("also")
"""
OTHER = """
    import os
    from pathlib import Path

    import pytest


    @pytest.mark.parametrize("n", range(6))
    def test_other(n):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "none")
        with (Path(__file__).parent / "ran.txt").open("a") as f:
            f.write(f"other{n} {worker}\\n")
"""


def ran_ids() -> set[str]:
    """The ids of SHARED's and OTHER's tests."""
    shared = {f"test_shared.py::{name}" for name in ("test_shares", "test_also_in_the_file")}
    return shared | {f"test_other.py::test_other[{n}]" for n in range(6)}


@pytest.mark.slow
def test_a_file_sharing_a_fixture_runs_on_one_worker_the_others_anywhere_one_line_each(
    tmp_path: Path,
) -> None:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    long = "import pytest\n\n\n@pytest.mark.slow\ndef test_long():\n    pass\n"
    for name, text in (("test_shared.py", SHARED), ("test_other.py", OTHER), ("test_z.py", long)):
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    ini = "[pytest]\nmarkers =\n    slow: x\n    threads_plugin: x\n"
    (tmp_path / "pytest.ini").write_text(ini, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    spread = ["-n", "2", "--dist", "loadgroup"]  # as `nox -s tests`, on 2 workers
    plain = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly"]
    # the slow tests first, a file that shares a fixture whole where it was
    listed = [*plain, "--collect-only", "-q"]
    collected = subprocess.run(
        listed, cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    assert [line for line in collected.stdout.splitlines() if "::" in line] == [
        "test_shared.py::test_shares",
        "test_shared.py::test_also_in_the_file",
        "test_z.py::test_long",
        *(f"test_other.py::test_other[{n}]" for n in range(6)),
    ], collected.stdout
    proc = subprocess.run(
        [*plain, *spread],
        cwd=tmp_path,
        env={**env, "GPUCI_FILE_TIMES": "1"},
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = (tmp_path / "ran.txt").read_text(encoding="utf-8").splitlines()
    ran = dict(line.split() for line in lines)
    assert len(lines) == len(ran) == 9  # the module's fixture was built once
    assert ran["built"] == ran["shares"] == ran["also"] != "none"  # on one worker
    assert {ran[f"other{n}"] for n in range(6)} == {"gw0", "gw1"}  # the others: on both
    for file, tests in (("test_shared.py", 2), ("test_other.py", 6)):
        lines = [line for line in proc.stdout.splitlines() if line.strip().startswith(file)]
        assert len(lines) == 1, proc.stdout
        assert re.fullmatch(
            rf"  {file}: {tests} tests in \d+\.\ds, \d+\.\d CPU-s \(\dm\d\ds so far\)", lines[0]
        ), lines
    # and when each worker ran its last test: how long one idled at the end
    ends = r"  workers' last tests ended: gw0 \dm\d\ds, gw1 \dm\d\ds \(\d+s apart\)"
    assert re.search(ends, proc.stdout), proc.stdout
    # and every test (9, fewer than the list's length) by the CPU it used, the most first
    listed = proc.stdout.partition("  the 9 tests that used the most CPU:\n")[2].splitlines()[:9]
    heaviest = [re.fullmatch(r" +(\d+\.\d) CPU-s (\S+)", line) for line in listed]
    assert all(heaviest), proc.stdout
    assert {m[2] for m in heaviest if m} == {*ran_ids(), "test_z.py::test_long"}, listed
    used = [float(m[1]) for m in heaviest if m]
    assert used == sorted(used, reverse=True), listed
