"""A gpuci killed with `kill -9` (issue 27, item 8), through the real CLI.

Its interpreters end with it; what a test started in its own session
lives on, and the next command on that OUT ends it and says so, never touching a pid that
names another process by now. The lock's and check.json's notes say what is true.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.cli_runner import clean_env, gpuci

MODES = ("--modes", "suite,parallel,isolated")
# starts a helper in its own session (out of the interpreter's process group), then waits
HOLDING = """
    import subprocess, time

    def test_hold():
        subprocess.Popen(["sleep", "300"], start_new_session=True)
        time.sleep(120)
"""
LEDGER = Path(".gpuci") / "processes.jsonl"

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="needs Linux's /proc and prctl"
)


def alive(pid: int) -> bool:
    """Whether the pid runs (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def wait_until(what: str, predicate: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"never: {what}")


def helpers_of(ledger: list[dict[str, object]]) -> list[int]:
    """The pids of the `sleep 300` helpers holding a cookie the ledger records."""
    cookies = {str(e["cookie"]).encode() for e in ledger if "cookie" in e}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        held = {v.split(b"=", 1)[1] for v in environ if v.startswith(b"GPUCI_INTERPRETER=")}
        if held & cookies and cmdline.startswith(b"sleep\0"):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_a_killed_check_leaves_nothing_behind(tmp_path: Path) -> None:
    (tmp_path / "test_hold.py").write_text(textwrap.dedent(HOLDING), encoding="utf-8")
    check = subprocess.Popen(
        [sys.executable, "-m", "gpuci", "check", ".", "--out", "out", *MODES],
        cwd=tmp_path,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ledger_path = tmp_path / "out" / LEDGER

    def ledger() -> list[dict[str, object]]:
        try:
            text = ledger_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.endswith("}")]

    # both screens' interpreters started, and each test started its helper
    wait_until("two helpers started", lambda: len(helpers_of(ledger())) == 2)
    recorded = ledger()
    interpreters = [int(str(e["pid"])) for e in recorded if "cookie" in e]
    helpers = helpers_of(recorded)
    assert len(interpreters) == 2
    os.kill(check.pid, signal.SIGKILL)
    check.wait(timeout=30)
    # its interpreters end with it; the helpers live on
    others = [int(str(e["pid"])) for e in recorded if int(str(e["pid"])) != check.pid]
    wait_until("its interpreters ended", lambda: not any(alive(p) for p in others), 10)
    assert all(alive(p) for p in helpers)
    try:
        # the next command on OUT ends them and says what it ended
        proc = gpuci("diff", "out", cwd=tmp_path)
        for pid in helpers:
            line = (
                "gpuci: warning: out: a gpuci command killed earlier left `sleep 300` running"
                f" (pid {pid},"
            )
            assert line in proc.stderr, proc.stderr
        wait_until("the helpers ended", lambda: not any(alive(p) for p in helpers), 10)
        assert not ledger_path.exists()  # an orderly end clears it
    finally:
        for pid in helpers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_recorded_pid_that_names_another_process_now_is_left_be(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n", encoding="utf-8")
    other = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    try:
        ledger = tmp_path / "out" / LEDGER
        ledger.parent.mkdir(parents=True)
        start = int(Path(f"/proc/{other.pid}/stat").read_text().rpartition(")")[2].split()[19])
        # the killed command's process had this pid, but started at another time
        entry = {"pid": other.pid, "start": start - 1, "cookie": "0123456789abcdef"}
        ledger.write_text(json.dumps(entry) + "\n", encoding="utf-8")
        proc = gpuci("check", ".", "--out", "out", *MODES, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "killed earlier" not in proc.stderr
        assert other.poll() is None  # still running
    finally:
        other.kill()
        other.wait()


@pytest.mark.slow
def test_a_lock_naming_a_live_pid_that_holds_no_lock_says_so(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n", encoding="utf-8")
    lock = tmp_path / "out" / ".gpuci" / "lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(f"pid {os.getpid()} (gpuci check)\n", encoding="utf-8")  # alive, no lock
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    took = f"took over the lock on out left by pid {os.getpid()} (gpuci check), not holding it"
    assert took in proc.stderr
    assert "no longer running" not in proc.stderr


@pytest.mark.slow
def test_a_corrupt_check_json_is_called_corrupt(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n", encoding="utf-8")
    state = tmp_path / "out" / ".gpuci"
    state.mkdir(parents=True)
    (state / "check.json").write_text('{"run_id": "abc', encoding="utf-8")
    proc = gpuci("check", ".", "--out", "out", *MODES, "--resume", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "out/.gpuci/check.json: corrupt, not JSON" in proc.stderr
    assert "run without --resume to start afresh" in proc.stderr
    assert "holds no check" not in proc.stderr


def test_a_sigint_ignored_by_whoever_started_gpuci_stays_ignored() -> None:
    # under nohup, or as a shell's background job, SIGINT is ignored: plain pytest ignores
    # it there too (Python raises no KeyboardInterrupt), so a mode does not stop on one
    from gpuci.run.proc.supervisor import Supervisor

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with Supervisor().handling_signals():
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with Supervisor().handling_signals():
            assert signal.getsignal(signal.SIGINT) != signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_swallowed_on_its_way_is_still_raised_where_gpuci_waits() -> None:
    # a KeyboardInterrupt raised inside an at-fork handler is printed as "Exception ignored"
    # and lost; the flag the command's handler sets first is checked by gpuci's waits
    from gpuci.run.proc.supervisor import INTERRUPTED, noting_interrupts, raise_if_interrupted

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with noting_interrupts():
            assert not INTERRUPTED.is_set()
            raise_if_interrupted()  # nothing to raise yet
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the signal arrives at once; this never ends by itself
            except KeyboardInterrupt:
                pass  # what code that swallows it does
            assert INTERRUPTED.is_set()
            with pytest.raises(KeyboardInterrupt):
                raise_if_interrupted()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with noting_interrupts():  # the next command starts with none noted
            raise_if_interrupted()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with noting_interrupts():  # ignored by whoever started gpuci: stays ignored
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
