"""End-to-end: nothing a test starts outlives `gpuci run`, and each leftover is recorded.

Tiny suites in tmp_path leave helpers behind in every way a process group kill misses (a
new session, a double fork) or that SIGTERM alone misses (a handler that ignores it); the
real CLI runs them in a real subprocess, and afterwards /proc shows none of them.
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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the reaper reads /proc and calls prctl: Linux only"
)

ROOT = Path(__file__).resolve().parent.parent
SLEEP = shutil.which("sleep") or "/bin/sleep"
MARK = "<b>x</b> @all"  # untrusted text in a leftover's command line

# Each test writes the pid of what it leaves behind to $GPUCI_TEST_PIDS/<name>.
HELPERS = """
    import os, subprocess, sys
    from pathlib import Path

    QUIET = dict.fromkeys(("stdin", "stdout", "stderr"), subprocess.DEVNULL)
    SLEEP = {sleep!r}

    def note(name, pid):
        Path(os.environ["GPUCI_TEST_PIDS"], name).write_text(str(pid))
"""
FILES = {
    "test_session.py": """
        def test_new_session():
            proc = subprocess.Popen([SLEEP, "300"], start_new_session=True, **QUIET)
            note("session", proc.pid)
    """,
    "test_daemon.py": """
        def test_double_fork():
            read, write = os.pipe()
            middle = os.fork()
            if middle == 0:
                os.setsid()
                if os.fork() == 0:
                    os.write(write, str(os.getpid()).encode())
                    os.execv(SLEEP, [SLEEP, "301"])
                os._exit(0)
            os.close(write)
            os.waitpid(middle, 0)
            data = b""
            while chunk := os.read(read, 64):  # EOF once the daemon has exec'd
                data += chunk
            note("daemon", int(data))
    """,
    "test_stubborn.py": """
        IGNORE = "import signal as s,time; s.signal(15,s.SIG_IGN); print(1,flush=1); time.sleep(99)"

        def test_ignores_sigterm():
            proc = subprocess.Popen(
                [sys.executable, "-c", IGNORE, {mark!r}], start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            )
            proc.stdout.readline()  # its handler is in place
            note("stubborn", proc.pid)
    """,
    "test_clean.py": """
        def test_nothing_left():
            subprocess.run([SLEEP, "0"], check=True)

        def test_fails():
            assert False, "a plain failure: its exit status must survive the reaping"
    """,
}


def _state(pid: int) -> str | None:
    """The process's state letter; None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return None


def _argv(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [arg.decode() for arg in raw.rstrip(b"\0").split(b"\0")] if raw else []


def write_suite(root: Path, files: dict[str, str] = FILES) -> Path:
    """Test files, each after HELPERS, with a pytest.ini."""
    root.mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    head = textwrap.dedent(HELPERS.format(sleep=SLEEP))
    for name, body in files.items():
        source = head + textwrap.dedent(body.replace("{mark!r}", repr(MARK)))
        (root / name).write_text(source, encoding="utf-8")
    return root


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    """Where the tests write their helpers' pids; any still running at the end is killed."""
    where = tmp_path / "pids"
    where.mkdir()
    yield where
    for path in where.iterdir():
        pid = int(path.read_text())
        argv = _argv(pid) or []
        if any(arg in ("300", "301", MARK) for arg in argv):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def gpuci(*args: str, cwd: Path, pids: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUCI_TEST_PIDS": str(pids), "PYTHONPATH": str(ROOT)}
    env.pop("CI_JOB_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "gpuci", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _left(pids: Path) -> dict[str, int]:
    return {path.name: int(path.read_text()) for path in pids.iterdir()}


def _by_file(run: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {f["file"]: f.get("leftovers", []) for f in run["files"]}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["isolated", "parallel"])
def test_every_leftover_is_ended_and_recorded_on_its_file(
    tmp_path: Path, pids: Path, mode: str
) -> None:
    root = write_suite(tmp_path / "suite")
    # running before gpuci started: never touched
    bystander = subprocess.Popen([SLEEP, "305"], start_new_session=True)
    try:
        proc = gpuci(
            "run", ".", "--mode", mode, "--out", "out", "--reruns", "0", cwd=root, pids=pids
        )
        left = _left(pids)
        still = {name: _state(pid) for name, pid in left.items()}
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
    assert proc.returncode == 1, proc.stderr  # test_fails failed, nothing else
    assert set(left) == {"session", "daemon", "stubborn"}
    assert still == dict.fromkeys(left), "left running after gpuci returned"

    run = json.loads((root / "out" / mode / "run.json").read_text(encoding="utf-8"))
    found = _by_file(run)
    assert found["test_clean.py"] == []
    expected = {
        "test_session.py": ("session", shlex.join([SLEEP, "300"]), False),
        "test_daemon.py": ("daemon", shlex.join([SLEEP, "301"]), False),
        "test_stubborn.py": ("stubborn", None, True),
    }
    for file, (name, cmdline, killed) in expected.items():
        [leftover] = found[file]
        assert leftover["pid"] == left[name]
        assert leftover["killed"] is killed, file
        assert 0 <= leftover["age_s"] < 120
        if cmdline is not None:
            assert leftover["cmdline"] == cmdline
        else:
            assert leftover["cmdline"].endswith(shlex.quote(MARK))
        assert f"gpuci: warning: {file} left `" in proc.stderr
    assert f"test_session.py left `{SLEEP} 300` running" in proc.stderr
    # the reaping took no exit status that belonged to an interpreter's Popen
    codes = {f["file"]: [i["exit_code"] for i in f["interpreters"]] for f in run["files"]}
    assert codes == {
        "test_session.py": [0],
        "test_daemon.py": [0],
        "test_stubborn.py": [0],
        "test_clean.py": [1],
    }
    assert run["gpu_check"].startswith(("nvidia-smi", "not checked"))


@pytest.mark.slow
def test_a_check_warns_of_leftovers_in_summary_report_and_comment(
    tmp_path: Path, pids: Path
) -> None:
    root = write_suite(tmp_path / "suite")
    for name in ("test_session.py", "test_daemon.py", "test_clean.py"):
        (root / name).unlink()
    out = root / "out"
    proc = gpuci("check", ".", "--out", "out", "--modes", "isolated", cwd=root, pids=pids)
    assert proc.returncode == 0, proc.stderr  # a warning, not a failure
    assert not any(_state(pid) for pid in _left(pids).values())
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    assert verdict["verdict"] == "warn"
    assert "1 process left running by tests" in verdict["reasons"]
    [warning] = [line for line in proc.stdout.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: isolated: test_stubborn.py left `")
    assert "gpuci ended it with SIGKILL" in warning

    html = (out / "report.html").read_text(encoding="utf-8")
    assert "test_stubborn.py left `" in html
    assert MARK not in html  # escaped
    assert "&lt;b&gt;x&lt;/b&gt; @all" in html
    comment = (out / "comment.md").read_text(encoding="utf-8")
    [note] = [line for line in comment.splitlines() if "test_stubborn.py left" in line]
    assert note.startswith("> ⚠️ ``")  # the whole untrusted line in one code span
    assert note.endswith("``")


def test_killed_helpers_are_reaped_not_left_as_zombies(tmp_path: Path) -> None:
    """Inside one gpuci process: adopted orphans reaped, its own children's statuses kept."""
    driver = tmp_path / "driver.py"
    driver.write_text(
        textwrap.dedent(
            f"""
            import json, os, subprocess, sys, time
            from pathlib import Path
            from gpuci.run.proc import reaper

            assert reaper.become_subreaper()
            quiet = dict.fromkeys(("stdin", "stdout", "stderr"), subprocess.DEVNULL)
            # a child of gpuci's own that has exited, its status not yet collected
            own = reaper.start_child(lambda: subprocess.Popen(["sh", "-c", "exit 7"], **quiet))
            # an orphan that ends by itself in its own session: adopted, then a zombie
            middle = subprocess.Popen(
                [sys.executable, "-c",
                 "import subprocess; print(subprocess.Popen([{SLEEP!r}, '0.2'],"
                 " start_new_session=True).pid)"],
                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            )
            orphan = int(middle.communicate()[0])
            def state(pid):
                try:
                    return Path(f"/proc/{{pid}}/stat").read_text().rpartition(")")[2].split()[0]
                except OSError:
                    return None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (state(orphan) != "Z" or state(own.pid) != "Z"):
                time.sleep(0.02)
            before = {{"orphan": state(orphan), "own": state(own.pid)}}
            reaped = reaper.reap_orphans()
            after = {{"orphan": state(orphan), "own": state(own.pid)}}
            code = own.wait()
            reaper.forget_child(own.pid)
            print(json.dumps({{"before": before, "reaped": reaped, "after": after, "code": code}}))
            """
        ),
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, str(driver)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["before"] == {"orphan": "Z", "own": "Z"}
    assert result["reaped"] == 1
    assert result["after"] == {"orphan": None, "own": "Z"}
    assert result["code"] == 7  # Popen still collected its own child's status


@pytest.mark.slow
def test_a_helper_in_the_interpreters_group_is_recorded_too(tmp_path: Path, pids: Path) -> None:
    """The process-group kill would end it unseen: it is ended and recorded first."""
    body = """
        def test_in_group():
            note("group", subprocess.Popen([SLEEP, "300"], **QUIET).pid)
    """
    root = write_suite(tmp_path / "suite", {"test_group.py": body})
    proc = gpuci("run", ".", "--mode", "isolated", "--out", "out", cwd=root, pids=pids)
    assert proc.returncode == 0, proc.stderr
    time.sleep(0.2)
    assert _state(_left(pids)["group"]) is None
    run = json.loads((root / "out" / "isolated" / "run.json").read_text(encoding="utf-8"))
    [leftover] = _by_file(run)["test_group.py"]
    assert leftover["cmdline"] == shlex.join([SLEEP, "300"])


FAKE_NVIDIA_SMI = """#!/bin/sh
# two GPUs; the compute apps are the pids listed in $GPUCI_TEST_HOLDERS ("pid uuid" lines)
case "$*" in
  *--query-gpu=index,uuid*) printf '0, GPU-fake0\\n1, GPU-fake1\\n' ;;
  *--query-compute-apps=*)
    if [ -f "$GPUCI_TEST_HOLDERS" ]; then
      while read -r pid uuid; do printf '%s, 1024, %s\\n' "$pid" "$uuid"; done \\
        < "$GPUCI_TEST_HOLDERS"
    fi ;;
esac
"""


GPU_0 = ("--out", "out", "--gpus", "0")


@pytest.mark.slow
def test_a_stranger_on_a_used_gpu_is_recorded_once(tmp_path: Path, pids: Path) -> None:
    """Where nvidia-smi answers: a new holder of GPU memory that gpuci did not start."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI, encoding="utf-8")
    (bin_dir / "nvidia-smi").chmod(0o755)
    holders = tmp_path / "holders.txt"
    root = tmp_path / "suite"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (root / "test_wait.py").write_text(
        textwrap.dedent(
            f"""
            import time
            from pathlib import Path

            def test_until_a_stranger_holds_gpu_memory():
                Path({str(tmp_path / "started")!r}).touch()
                deadline = time.monotonic() + 60
                # until the strangers are listed (GPU-fake1 comes with them; GPU-fake0 alone
                # is the holder that was there before the check)
                while "GPU-fake1" not in Path({str(holders)!r}).read_text():
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
            """
        ),
        encoding="utf-8",
    )
    (root / "test_later.py").write_text("def test_later():\n    pass\n", encoding="utf-8")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        # there before the check: never a stranger
        before = subprocess.Popen([SLEEP, "309"], start_new_session=True)
        procs.append(before)
        holders.write_text(f"{before.pid} GPU-fake0\n", encoding="utf-8")
        env = {
            **os.environ,
            "GPUCI_TEST_PIDS": str(pids),
            "GPUCI_TEST_HOLDERS": str(holders),
            "PYTHONPATH": str(ROOT),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        }
        gpuci_proc = subprocess.Popen(
            [sys.executable, "-m", "gpuci", "run", ".", "--mode", "isolated", *GPU_0],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists():
            assert time.monotonic() < deadline and gpuci_proc.poll() is None
            time.sleep(0.05)
        # came during the check, outside gpuci's tree: one on a GPU gpuci uses, one not
        stranger = subprocess.Popen([SLEEP, "310"], start_new_session=True)
        elsewhere = subprocess.Popen([SLEEP, "311"], start_new_session=True)
        procs += [stranger, elsewhere]
        holders.write_text(
            f"{before.pid} GPU-fake0\n{elsewhere.pid} GPU-fake1\n{stranger.pid} GPU-fake0\n",
            encoding="utf-8",
        )
        _, stderr = gpuci_proc.communicate(timeout=120)
        assert all(p.poll() is None for p in procs)  # gpuci ended none of them
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert gpuci_proc.returncode == 0, stderr
    run = json.loads((root / "out" / "isolated" / "run.json").read_text(encoding="utf-8"))
    assert run["gpu_check"] == "nvidia-smi"
    found = {f["file"]: f.get("strangers", []) for f in run["files"]}
    assert found == {
        "test_wait.py": [
            {
                "pid": stranger.pid,
                "used_mib": 1024,
                "gpu_uuid": "GPU-fake0",
                "cmdline": shlex.join([SLEEP, "310"]),
                "preexisting": False,
            }
        ],
        "test_later.py": [],  # still there, but said once
    }
    assert (
        f"gpuci: warning: after test_wait.py, pid {stranger.pid} (`{SLEEP} 310`) held 1024 MiB"
        " on GPU-fake0; gpuci did not start it"
    ) in stderr


@pytest.mark.slow
def test_a_helper_holding_the_output_pipe_is_ended_and_recorded(tmp_path: Path, pids: Path) -> None:
    """The interpreter is gone but its helper keeps its stdout open: gpuci does not wait."""
    body = """
        def test_inherits_stdout():  # with -s, fd 1 is gpuci's pipe
            note("pipe", subprocess.Popen([SLEEP, "300"], start_new_session=True).pid)
    """
    root = write_suite(tmp_path / "suite", {"test_pipe.py": body})
    start = time.monotonic()
    proc = gpuci("run", ".", "--mode", "isolated", "--out", "out", "--", "-s", cwd=root, pids=pids)
    assert proc.returncode == 0, proc.stderr
    # had gpuci waited for the pipe, it would have waited out the helper's 300 s (a bound
    # that far from both, not a timing: a loaded machine takes seconds, not minutes)
    assert time.monotonic() - start < 200
    assert _state(_left(pids)["pipe"]) is None
    run = json.loads((root / "out" / "isolated" / "run.json").read_text(encoding="utf-8"))
    [leftover] = _by_file(run)["test_pipe.py"]
    assert leftover["cmdline"] == shlex.join([SLEEP, "300"])
    assert leftover["pid"] == _left(pids)["pipe"]


# Its main thread ends (pthread_exit) while another thread lives on: /proc shows the leader
# as a zombie though the process still runs, as a CUDA process does while it tears down
# its context after SIGTERM. Seen on an H100: the next file still saw it in /proc.
LEADER_GONE = (
    "import ctypes, threading, time; print(1, flush=True);"
    " threading.Thread(target=time.sleep, args=(302,)).start();"
    " ctypes.CDLL(None).pthread_exit(None)"
)


@pytest.mark.slow
def test_a_process_whose_main_thread_ended_is_still_ended(tmp_path: Path, pids: Path) -> None:
    files = {
        "test_leader.py": f"""
            def test_leaves_a_headless_process():
                proc = subprocess.Popen(
                    [sys.executable, "-c", {LEADER_GONE!r}], start_new_session=True,
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                )
                proc.stdout.readline()
                note("leader", proc.pid)
        """
    }
    root = write_suite(tmp_path / "suite", files)
    proc = gpuci("run", ".", "--mode", "isolated", "--out", "out", cwd=root, pids=pids)
    assert proc.returncode == 0, proc.stderr
    pid = _left(pids)["leader"]
    assert _state(pid) is None, "still in /proc after gpuci returned"
    run = json.loads((root / "out" / "isolated" / "run.json").read_text(encoding="utf-8"))
    [leftover] = _by_file(run)["test_leader.py"]
    assert leftover["pid"] == pid
