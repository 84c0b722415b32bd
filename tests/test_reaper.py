"""The reaper against real processes: helpers a test leaves behind, and GPU memory holders.

Becoming a subreaper is process-wide, so each leftover scenario runs in a fresh driver
interpreter that imports gpuci.run.proc.reaper and prints what it saw as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuci.processes import GpuProcess
from gpuci.run.proc.holders import gpu_processes, gpu_strangers
from gpuci.run.proc.reaper import (
    CMDLINE_CAP,
    COOKIE_ENV,
    Leftover,
    become_subreaper,
    descendant_pids,
    new_cookie,
    snapshot_pids,
)

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the reaper reads /proc and calls prctl: Linux only"
)

ROOT = Path(__file__).resolve().parent.parent
SLEEP = shutil.which("sleep") or "/bin/sleep"
IGNORE_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('ready', flush=True); time.sleep(300)"
)

# What the interpreters below leave behind, by the names they write their pids under.
LEFT_BEHIND = {
    "session": [SLEEP, "300"],
    "daemon": [SLEEP, "301"],
    "cleared": [SLEEP, "302"],
    "ignorer": [sys.executable, "-c", IGNORE_TERM],
    "b_helper": [SLEEP, "303"],
}

# A stand-in for a pytest interpreter. `a` leaves four helpers behind and exits 3: one in
# its own session, a double-forked daemon, one that ignores SIGTERM, and one with a
# cleared environment; `b` leaves one in its own session and exits 5.
INTERPRETER = """
    import json, os, subprocess, sys

    kind, sleep, out = sys.argv[1:]
    quiet = dict.fromkeys(("stdin", "stdout", "stderr"), subprocess.DEVNULL)
    if kind == "b":
        pid = subprocess.Popen([sleep, "303"], start_new_session=True, **quiet).pid
        open(out, "w").write(json.dumps({"b_helper": pid}))
        sys.exit(5)
    pids = {"session": subprocess.Popen([sleep, "300"], start_new_session=True, **quiet).pid}
    pids["cleared"] = subprocess.Popen([sleep, "302"], env={}, **quiet).pid
    read, write = os.pipe()  # close-on-exec: EOF once the daemon has become `sleep 301`
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(write, str(os.getpid()).encode())
            os.execv(sleep, [sleep, "301"])
        os._exit(0)
    os.close(write)
    os.waitpid(middle, 0)
    data = b""
    while chunk := os.read(read, 64):
        data += chunk
    pids["daemon"] = int(data)
    ignorer = subprocess.Popen(
        [sys.executable, "-c", IGNORE_TERM], stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    ignorer.stdout.readline()  # its SIGTERM handler is in place
    pids["ignorer"] = ignorer.pid
    open(out, "w").write(json.dumps(pids))
    sys.exit(3)
"""

# gpuci's side: become subreaper, start interpreters a and b beside a bystander of its
# own without a cookie, end a's leftovers before collecting a's exit status, b's after.
DRIVER = """
    import json, os, subprocess, sys, time
    from pathlib import Path
    from gpuci.run.proc import reaper

    sleep, tmp, cookie_a, grace = sys.argv[1], Path(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    cookie_b = reaper.new_cookie()
    quiet = dict.fromkeys(("stdin", "stdout", "stderr"), subprocess.DEVNULL)
    result = {"subreaper": reaper.become_subreaper()}
    bystander = subprocess.Popen([sleep, "304"], start_new_session=True, **quiet)
    (tmp / "driver.json").write_text(json.dumps({"bystander": bystander.pid}))

    def start(kind, cookie):
        env = dict(os.environ, **{reaper.COOKIE_ENV: cookie})
        out = str(tmp / f"{kind}.json")
        command = [sys.executable, str(tmp / "interpreter.py"), kind, sleep, out]
        with open(tmp / f"{kind}.err", "wb") as err:
            return subprocess.Popen(command, env=env, start_new_session=True,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)

    def wait_exited(pid):  # a zombie: exited, its status not collected
        for _ in range(1000):
            if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                return
            time.sleep(0.01)
        raise SystemExit(f"interpreter {pid} never exited")

    def alive():
        return {name: Path(f"/proc/{pid}").exists() for name, pid in pids.items()}

    a, b = start("a", cookie_a), start("b", cookie_b)
    wait_exited(a.pid)
    wait_exited(b.pid)
    pids = {**json.loads((tmp / "a.json").read_text()), **json.loads((tmp / "b.json").read_text())}
    result["pids"] = pids
    left = reaper.end_leftovers(cookie_a, interpreter=a.pid, grace=grace)
    result["left_a"] = [leftover.to_json() for leftover in left]
    result["alive_after_a"] = alive()
    result["codes"] = [a.wait(), b.wait()]
    left = reaper.end_leftovers(cookie_b, interpreter=b.pid, grace=grace)
    result["left_b"] = [leftover.to_json() for leftover in left]
    result["alive_after_b"] = alive()
    result["bystander"] = {"pid": bystander.pid, "alive": bystander.poll() is None}
    print(json.dumps(result))
"""


def _argv(pid: int) -> list[str] | None:
    """The process's arguments; None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [arg.decode() for arg in raw.rstrip(b"\0").split(b"\0")] if raw else []


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


@pytest.fixture
def kill_after() -> Iterator[list[tuple[int, list[str]]]]:
    """(pid, argv) of processes to kill at the end, if that pid still runs that argv."""
    started: list[tuple[int, list[str]]] = []
    yield started
    for pid, argv in started:
        if _argv(pid) == argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def popen() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The test's own children, killed and collected at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def _driver_pids(tmp: Path) -> list[int]:
    """Every pid the driver and its interpreters wrote down, even if the driver failed."""
    pids: list[int] = []
    for name in ("driver.json", "a.json", "b.json"):
        with contextlib.suppress(OSError, ValueError):
            pids += json.loads((tmp / name).read_text()).values()
    return pids


def test_ends_what_an_interpreter_left_and_nothing_else(
    tmp_path: Path,
    kill_after: list[tuple[int, list[str]]],
    popen: list[subprocess.Popen[bytes]],
) -> None:
    cookie = new_cookie()
    # holds the cookie, but gpuci did not start it: never touched
    outsider = subprocess.Popen(
        [SLEEP, "306"], env={**os.environ, COOKIE_ENV: cookie}, start_new_session=True
    )
    popen.append(outsider)
    (tmp_path / "interpreter.py").write_text(
        f"IGNORE_TERM = {IGNORE_TERM!r}\n" + textwrap.dedent(INTERPRETER), encoding="utf-8"
    )
    (tmp_path / "driver.py").write_text(textwrap.dedent(DRIVER), encoding="utf-8")
    try:
        done = subprocess.run(
            [sys.executable, str(tmp_path / "driver.py"), SLEEP, str(tmp_path), cookie, "0.5"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
    finally:
        for pid in _driver_pids(tmp_path):
            kill_after += [(pid, argv) for argv in (*LEFT_BEHIND.values(), [SLEEP, "304"])]
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    pids = result["pids"]
    assert result["subreaper"] is True

    left = {leftover["pid"]: Leftover.from_json(leftover) for leftover in result["left_a"]}
    a_names = ("session", "daemon", "cleared", "ignorer")
    assert set(left) == {pids[name] for name in a_names}
    for name in a_names:
        leftover = left[pids[name]]
        assert leftover.cmdline == shlex.join(LEFT_BEHIND[name])
        assert leftover.killed is (name == "ignorer"), name
        assert 0 <= leftover.age_s < 60
    assert left[pids["session"]].age_s >= left[pids["ignorer"]].age_s  # started first
    # a's helpers are gone and reaped, not zombies; b's helper is another cookie's
    assert result["alive_after_a"] == {**dict.fromkeys(a_names, False), "b_helper": True}
    assert result["codes"] == [3, 5]  # neither interpreter's exit status was taken

    [b_left] = result["left_b"]
    assert b_left["pid"] == pids["b_helper"]
    assert b_left["cmdline"] == shlex.join(LEFT_BEHIND["b_helper"])
    assert not any(result["alive_after_b"].values())

    # gpuci's own child without a cookie, and a stranger holding the cookie, live on
    assert result["bystander"]["alive"] is True
    assert _running(result["bystander"]["pid"])
    assert outsider.poll() is None


def test_leftover_round_trips_through_json() -> None:
    leftover = Leftover(pid=42, cmdline="sleep 300", age_s=1.23456, killed=True)
    data = json.loads(json.dumps(leftover.to_json()))
    assert data == {"pid": 42, "cmdline": "sleep 300", "age_s": 1.235, "killed": True}
    assert Leftover.from_json(data) == Leftover(
        pid=42, cmdline="sleep 300", age_s=1.235, killed=True
    )


def test_no_subreaper_off_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert become_subreaper() is False


def _fake_nvidia_smi(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, csv: str, code: int = 0
) -> Path:
    """An nvidia-smi first on PATH that prints `csv`; returns where it writes its args."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > "{bin_dir}/args"\ncat <<"EOF"\n{csv}EOF\nexit {code}\n',
        encoding="utf-8",
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir / "args"


def test_gpu_processes_reads_nvidia_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    args = _fake_nvidia_smi(
        monkeypatch,
        tmp_path,
        "1234, 512, GPU-aaa\n5678, [N/A], GPU-bbb\nNo running processes found\n",
    )
    assert gpu_processes() == [
        GpuProcess(pid=1234, used_mib=512, gpu_uuid="GPU-aaa"),
        GpuProcess(pid=5678, used_mib=None, gpu_uuid="GPU-bbb"),
    ]
    assert args.read_text().splitlines() == [
        "--query-compute-apps=pid,used_memory,gpu_uuid",
        "--format=csv,noheader,nounits",
    ]


def test_gpu_processes_is_empty_when_nvidia_smi_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_nvidia_smi(monkeypatch, tmp_path, "1234, 512, GPU-aaa\n", code=9)
    assert gpu_processes() == []


def test_gpu_processes_is_empty_without_nvidia_smi(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_processes() == []


def test_gpu_strangers_are_the_holders_gpuci_does_not_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, popen: list[subprocess.Popen[bytes]]
) -> None:
    before = snapshot_pids()
    ours = subprocess.Popen([SLEEP, "307"])
    long_argv = [SLEEP, "308", "0" * (2 * CMDLINE_CAP)]
    escaped = subprocess.Popen(long_argv)
    popen += [ours, escaped]
    running = descendant_pids()
    assert {os.getpid(), ours.pid, escaped.pid} <= running
    assert 1 not in running
    # Left out of `ours`, as if it had escaped gpuci's tree: a process gpuci is a
    # subreaper for can leave it no other way (and these tests may run in one).
    running -= {escaped.pid}
    ghost = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # never a process
    holders = [os.getpid(), ours.pid, escaped.pid, 1, ghost]
    _fake_nvidia_smi(
        monkeypatch,
        tmp_path,
        "".join(f"{pid}, {100 + i}, GPU-{i}\n" for i, pid in enumerate(holders)),
    )
    found = gpu_strangers(gpu_processes(), before=before, ours=running)
    assert [(s.pid, s.used_mib, s.preexisting) for s in found] == [
        (escaped.pid, 102, False),
        (1, 103, True),
        (ghost, 104, False),
    ]
    cmdline = found[0].cmdline
    assert cmdline.startswith(shlex.join(long_argv[:2]) + " 000")
    assert cmdline.endswith("...")
    assert len(cmdline) == CMDLINE_CAP
    assert found[2].cmdline == ""
    assert found[2].to_json() == {
        "pid": ghost,
        "used_mib": 104,
        "gpu_uuid": "GPU-4",
        "cmdline": "",
        "preexisting": False,
    }
