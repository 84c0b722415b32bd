"""GPU memory: peaks per interpreter, and when a slot may start a file."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from gpuci.formats import mode_run_to_json, write_json_atomic
from gpuci.model import FileRun, FileStatus, Interpreter, Mode, ModeRun
from gpuci.run.proc import gpumem
from gpuci.run.proc.gpumem import (
    MARGIN_MIB,
    MemoryGate,
    PeakSampler,
    earlier_peaks,
    may_start,
    narrow_files,
    read_peaks,
    screen_peaks,
)
from gpuci.run.proc.supervisor import Supervisor


@pytest.mark.parametrize(
    ("need", "free", "others", "starts"),
    [
        (None, 100, True, True),  # no history: start freely
        (1000, None, True, True),  # free memory unknown (no NVML, no nvidia-smi)
        (1000, 0, False, True),  # nothing else of gpuci's runs: waiting frees nothing
        (1000, 1000, True, False),  # exactly its peak: no margin left
        (1000, 1100 + MARGIN_MIB, True, True),  # its peak, 10 % and the fixed margin
        (1000, 1099 + MARGIN_MIB, True, False),
    ],
)
def test_a_slot_starts_a_file_only_where_its_peak_fits(
    need: int | None, free: int | None, others: bool, starts: bool
) -> None:
    assert may_start(need, free, others_running=others) is starts


def test_a_peak_is_the_most_an_interpreters_session_held_at_once() -> None:
    sampler = PeakSampler(source=None)
    sampler._peaks = {100: None, 200: None}  # two interpreters, followed
    sessions = {100: 100, 101: 100, 200: 200, 300: 300}
    sampler.record({100: {"0": 500}, 101: {"0": 250}, 300: {"1": 9000}}, sessions)  # 300: not ours
    sampler.record({100: {"0": 400, "1": 200}}, sessions)
    # 500 + 250 at once, more than 600 later; memory held on GPUs 0 and 1
    assert sampler.done(100) == (750, 2)
    assert sampler.done(200) == (None, None)  # never seen on a GPU: not measured, not 0
    assert sampler.done(100) == (None, None)
    sampler._peaks = {400: None}
    sampler.record({400: {"GPU-a": 100}, 401: {"GPU-a": 50}}, {400: 400, 401: 400})
    assert sampler.done(400) == (150, 1)  # it and its child, both on one GPU


def test_without_a_gpu_nothing_is_followed() -> None:
    sampler = PeakSampler(source=None)
    sampler.watch(123)
    assert sampler.done(123) == (None, None)
    assert sampler._thread is None


def write_run(
    path: Path,
    peaks: dict[str, list[int | None]],
    held: dict[str, list[int | None]] | None = None,
) -> Path:
    """A parallel run.json whose files' interpreters peaked as given, on as many GPUs as
    `held` says (run.json's own writer)."""
    files = tuple(
        FileRun(
            file=name,
            status=FileStatus.PASSED,
            slot=0,
            gpu="0",
            start=0.0,
            end=1.0,
            interpreters=tuple(
                Interpreter(
                    exit_code=0,
                    start=0.0,
                    end=1.0,
                    log="x",
                    gpu_peak_mib=peak,
                    gpus_held=(held or {}).get(name, [None] * len(file_peaks))[n],
                )
                for n, peak in enumerate(file_peaks)
            ),
        )
        for name, file_peaks in peaks.items()
    )
    run = ModeRun(mode=Mode.PARALLEL, command=("gpuci",), rootdir=".", workers=2, files=files)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, mode_run_to_json(run))
    return path


def test_peaks_are_read_per_file_from_an_earlier_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_run(out / "parallel" / "run.json", {"a.py": [300, 700], "b.py": [None], "c.py": []})
    assert read_peaks(out / "parallel") == {"a.py": 700}
    assert earlier_peaks(None, out) == {"a.py": 700}
    other = write_run(tmp_path / "elsewhere.json", {"d.py": [50]})
    assert earlier_peaks(other, out) == {"d.py": 50}  # --durations wins
    assert earlier_peaks(None, tmp_path / "empty") == {}


def test_the_evidence_takes_each_files_peak_from_isolated_and_parallel(tmp_path: Path) -> None:
    # a lazy isolated pass left the hog's file out: parallel's peak stands for it
    write_run(tmp_path / "parallel" / "run.json", {"hog.py": [53000], "a.py": [300]})
    write_run(tmp_path / "isolated" / "run.json", {"a.py": [500]})
    assert screen_peaks(tmp_path) == {"hog.py": 53000, "a.py": 500}
    assert screen_peaks(tmp_path / "empty") == {}


def test_the_gate_waits_for_room_while_others_run() -> None:
    free = [0]
    supervisor = Supervisor()
    gate = MemoryGate({"big.py": 1000}, free_mib=lambda device: free[0])
    supervisor._live.add(object())  # type: ignore[arg-type]  # one interpreter runs
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (gate.wait("big.py", "1,0", supervisor), done.set()))
    waiter.start()
    time.sleep(0.3)
    assert not done.is_set()  # no room on GPU 1
    free[0] = 2000
    assert done.wait(5)
    waiter.join()
    gate.wait("small.py", "0", supervisor)  # no history: at once


def test_the_gate_keeps_memory_for_a_file_from_its_admission_to_its_end() -> None:
    # two big files starting at the same moment: neither holds anything yet, so the free
    # memory alone would let both in; what the first may still take keeps the second out
    free, held = [10000], {41: 0}
    supervisor = Supervisor()
    supervisor._live.add(object())  # type: ignore[arg-type]  # one interpreter runs
    gate = MemoryGate(
        {"a.py": 5000, "b.py": 5000, "c.py": 1000},
        free_mib=lambda device: free[0],
        held_mib=lambda pid: held[pid],
    )
    first = gate.wait("a.py", "0", supervisor)
    gate.started(first, 41)
    assert gate.wait("c.py", "0", supervisor) is not None  # a small one fits beside it
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (gate.wait("b.py", "0", supervisor), done.set()))
    waiter.start()
    time.sleep(0.3)
    assert not done.is_set()  # nothing held yet, but a.py may take 5000 and more
    free[0], held[41] = 5000, 5000  # a.py holds its peak: still no room
    time.sleep(0.3)
    assert not done.is_set()
    gate.done(first)
    free[0] = 10000  # a.py ended
    assert done.wait(60)
    waiter.join()


def test_the_gate_lets_a_file_start_once_nothing_else_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    supervisor = Supervisor()
    gate = MemoryGate({"big.py": 10**6}, free_mib=lambda device: 0)

    def never(seconds: float) -> None:
        raise AssertionError(f"the gate waited ({seconds} s) with nothing else running")

    monkeypatch.setattr(gpumem.time, "sleep", never)  # no clock: a wait is a failure
    gate.wait("big.py", "0", supervisor)


def test_narrow_files_are_those_measured_on_one_gpu_in_every_screen(tmp_path: Path) -> None:
    # what decides that a file's strict evidence runs may keep one GPU of several
    held = {"a.py": [1], "b.py": [1], "wide.py": [2], "c.py": [None]}
    write_run(tmp_path / "parallel" / "run.json", {f: [500] for f in held}, held)
    write_run(
        tmp_path / "isolated" / "run.json", {"b.py": [500], "d.py": [0]}, {"b.py": [2], "d.py": [0]}
    )
    # b.py reached a second GPU in its file alone; c.py was never measured; d.py held none
    assert narrow_files(tmp_path) == {"a.py", "d.py"}
