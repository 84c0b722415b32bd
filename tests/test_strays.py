"""The warning lines of leftovers and strangers, from run.json's and verdict.json's shapes."""

from __future__ import annotations

from gpuci.processes import Leftover, Stranger
from gpuci.run.proc.strays import (
    CMDLINE_SHOWN,
    leftover_count,
    leftover_line,
    stranger_line,
    verdict_lines,
)


def _leftover(pid: int, cmdline: str = "sleep 300", *, killed: bool = False) -> dict[str, object]:
    return Leftover(pid=pid, cmdline=cmdline, age_s=1.25, killed=killed).to_json()


def test_a_leftover_says_file_command_pid_age_and_how_it_ended() -> None:
    line = leftover_line("test_x.py", Leftover(pid=7, cmdline="sleep 300", age_s=1.26, killed=True))
    assert line == (
        "test_x.py left `sleep 300` running"
        " (pid 7, 1.3s old; gpuci ended it with SIGKILL: it outlived SIGTERM)"
    )
    long = leftover_line("t.py", Leftover(pid=7, cmdline="x" * 500, age_s=0, killed=False))
    assert f"`{'x' * (CMDLINE_SHOWN - 3)}...`" in long


def test_a_stranger_says_pid_memory_and_gpu() -> None:
    found = Stranger(pid=9, used_mib=None, gpu_uuid="GPU-1", cmdline="", preexisting=False)
    assert stranger_line("t.py", found, where="parallel") == (
        "parallel: after t.py, pid 9 held memory on GPU-1; gpuci did not start it"
    )


def test_verdict_lines_read_modes_and_evidence_and_skip_malformed_entries() -> None:
    modes = {
        "isolated": {
            "file_runs": [
                {"file": "a.py", "leftovers": [_leftover(1), {"pid": "x"}, "junk"]},
                {"file": "b.py"},
                "junk",
            ]
        },
        "suite": "junk",
    }
    evidence = {"leftovers": {"c.py": [_leftover(3, killed=True)]}, "strangers": "junk"}
    lines = verdict_lines(modes, evidence)
    assert [line.split(" (pid")[0] for line in lines] == [
        "isolated: a.py left `sleep 300` running",
        "evidence: c.py left `sleep 300` running",
    ]
    assert leftover_count(modes, evidence) == 2
    assert verdict_lines({}, {}) == []


def test_many_lines_are_cut_with_a_count() -> None:
    modes = {
        "isolated": {
            "file_runs": [{"file": "a.py", "leftovers": [_leftover(i) for i in range(30)]}]
        }
    }
    lines = verdict_lines(modes, {}, limit=5)
    assert len(lines) == 5
    assert lines[-1] == "... and 26 more left running or holding GPU memory (see run.json)"
