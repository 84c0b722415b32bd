"""The isolated pass's first interpreters start before their turn:
- in a check whose interpreters' start-ups are worth hiding (each sleeps 1.2 s in its
  conftest.py), a file that failed in the parallel screen starts its isolated interpreter
  while the screens go on (`gpuci.lazy_isolated.IsolatedAhead`), and the pass takes it;
- in an isolated pass, the files that run one at a time (here one that failed fresh in
  parallel) start while the side-by-side ones run (`gpuci.run.sched.one_mode.run_mode`),
  or go first where the screens started only theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cli_runner import needs_run_parallel

from gpuci.run.proc.supervisor import Supervisor
from gpuci.run.sched.one_mode import _run_units
from gpuci.run.sched.plan import Schedule

# test_a.py's import provides what test_b.py needs (a depends-on-others test); each
# interpreter's start-up takes 1.2 s
from tests.test_evidence_ahead import PROVIDED, checked, read_json


def _interpreters(out: Path, mode: str) -> dict[str, list[dict[str, Any]]]:
    run = read_json(out / mode / "run.json")
    return {f["file"]: f["interpreters"] for f in run["files"] if f["interpreters"]}


@pytest.mark.slow
def test_a_file_that_failed_in_a_screen_starts_its_isolated_run_during_the_screens(
    tmp_path: Path,
) -> None:
    _, out, _ = checked(tmp_path, PROVIDED, "--workers", "2", "--modes", "suite,parallel,isolated")
    verdict = read_json(out / "verdict.json")
    victim = next(t for t in verdict["tests"] if t["id"] == "test_b.py::test_b_needs_a_provider")
    assert victim["category"] == "depends-on-others"  # as without it: the run is the same
    isolated = _interpreters(out, "isolated")
    assert list(isolated) == ["test_b.py"]  # the rest inferred from parallel
    # started during the screens, held after its collection: the pass's wall counts it
    # from when the pass took it, its start-up only what was not hidden by then
    first = isolated["test_b.py"][0]
    assert first["ahead"] and first["start"] >= 0, isolated


# In the isolated pass test_a.py (it failed in threads only) runs side by side and
# test_c.py (it failed fresh in parallel) one at a time after it; test_a.py passes there
# only once test_c.py's isolated interpreter has imported its conftest.py: started while
# test_a.py runs (a bound of 60 s, never the expected case: before, test_c.py's
# interpreter started only after test_a.py ended). The screens' start-ups are quick, so
# nothing was held for isolated during them.
ONE_AT_A_TIME = {
    "conftest.py": """
        import os, sys
        from pathlib import Path

        MARKS = Path(__file__).parent / "marks"
        if os.environ.get("GPUCI_MODE") == "isolated":
            MARKS.mkdir(exist_ok=True)
            for arg in sys.argv:
                if arg.endswith(".py"):
                    (MARKS / f"imported-{os.path.basename(arg)}").write_text("")
        """,
    "pytest.ini": "[pytest]\n",
    "state.py": "PROVIDED = False\n",
    "test_a.py": """
        import os, threading, time
        from pathlib import Path

        MARKS = Path(__file__).parent / "marks"


        def test_a_in_the_main_thread_sees_the_serial_file_started():
            assert threading.current_thread() is threading.main_thread()
            if os.environ.get("GPUCI_MODE") == "isolated":
                deadline = time.monotonic() + 60
                while not (MARKS / "imported-test_c.py").exists():
                    assert time.monotonic() < deadline, "test_c.py's interpreter never started"
                    time.sleep(0.05)
        """,
    "test_b.py": """
        import state

        state.PROVIDED = True


        def test_b():
            pass
        """,
    "test_c.py": """
        import state


        def test_c_needs_a_provider():
            assert state.PROVIDED
        """,
}


@needs_run_parallel
@pytest.mark.slow
def test_the_files_run_one_at_a_time_start_while_the_others_run(tmp_path: Path) -> None:
    # the isolated pass is what this shows: no evidence (test_c.py's provider search)
    modes = ("--modes", "suite,parallel,threads,isolated", "--evidence-budget", "0")
    _, out, printed = checked(tmp_path, ONE_AT_A_TIME, "--workers", "2", *modes)
    isolated = read_json(out / "isolated" / "run.json")
    outcomes = {t["id"]: t["outcome"] for t in isolated["tests"] if not t.get("inferred")}
    assert outcomes == {
        "test_a.py::test_a_in_the_main_thread_sees_the_serial_file_started": "passed",
        "test_c.py::test_c_needs_a_provider": "failed",
    }, printed[-3000:]
    # test_a.py passed side by side, the first time (not again alone after test_c.py ran)
    assert "did not pass beside others" not in printed, printed[-3000:]


@dataclass
class Units:
    """A mode's session as `_run_units` sees it: its units, which of them the screens
    started for it, and the order they were started ahead and run in."""

    schedule: Schedule
    held_for_it: frozenset[str]
    supervisor: Supervisor = field(default_factory=Supervisor)
    events: list[tuple[str, str]] = field(default_factory=list)

    def units(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return self.schedule.pool, self.schedule.serial

    def held(self, key: str) -> bool:
        return key in self.held_for_it

    def start_ahead(self, key: str, slot: int, gpu: str | None) -> None:
        self.events.append(("ahead", key))

    def run(self, key: str, slot: int) -> None:
        self.events.append(("run", key))


def test_the_files_run_one_at_a_time_go_first_where_only_theirs_was_started_for_them() -> None:
    # gpu_polluted's isolated pass: test_race.py failed in threads only (side by side), and
    # ended that screen late, so nothing was started for it; the screens held one of the
    # files that failed in parallel (one at a time), not the first
    schedule = Schedule(
        pool=("test_race.py",), serial=("test_x.py", "test_hog.py"), workers=2, slot_gpus=("0", "0")
    )
    held = Units(schedule, frozenset({"test_hog.py"}))
    _run_units(held, held.run)  # type: ignore[arg-type]
    runs = [key for what, key in held.events if what == "run"]
    assert runs == ["test_hog.py", "test_x.py", "test_race.py"]
    # the side-by-side file collected while the others ran, started before any of them
    assert held.events[0] == ("ahead", "test_race.py")
    # otherwise the side-by-side files first, as before
    for started in (frozenset(), frozenset({"test_hog.py", "test_race.py"})):
        before = Units(schedule, started)
        _run_units(before, before.run)  # type: ignore[arg-type]
        runs = [key for what, key in before.events if what == "run"]
        assert runs == ["test_race.py", "test_x.py", "test_hog.py"]
        assert before.events[0] == ("ahead", "test_x.py")
