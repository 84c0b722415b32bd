"""Reaper: end what a test left behind, and collect the zombies gpuci adopts.

A test's helper in its own session, a double-forked daemon, or one that ignores SIGTERM
outlives its interpreter's process group and keeps its CUDA context. On Linux:
`become_subreaper()` (once per gpuci process) re-parents orphans to gpuci, not init; each
interpreter gets a `new_cookie()` in COOKIE_ENV, inherited by all it starts; and once it
has exited, `end_leftovers(cookie, interpreter=pid)` ends every descendant of gpuci that
holds this cookie, or holds none (a cleared or unreadable environment) and is in the
interpreter's session: SIGTERM, `grace`, SIGKILL. It reaps gpuci's zombies among them by
pid, never with `waitpid(-1)`, which would take the exit statuses Popen waits for in other
threads, and returns what it ended as `Leftover`s.

Never touched: a process outside gpuci's tree, whatever its environment; the interpreter
itself, or any child gpuci started through `start_child`; one holding another
interpreter's cookie. Missed: one that cleared its environment
and left the session. Without the subreaper (not Linux, prctl refused) orphans leave
gpuci's tree, and the process-group kill is all that remains.

Who else holds GPU memory is `gpuci.run.proc.holders`' question, on `descendant_pids()` and
`snapshot_pids()`. Once gpuci is a subreaper, the children it starts while interpreters
run go through `start_child`, and `reap_orphans()` collects the zombies it adopted.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from gpuci.processes import Leftover

__all__ = [
    "COOKIE_ENV",
    "Leftover",
    "become_subreaper",
    "command_line",
    "descendant_pids",
    "end_leftovers",
    "end_recorded",
    "forget_child",
    "is_visible",
    "new_cookie",
    "reap_orphans",
    "session_of",
    "snapshot_pids",
    "start_child",
    "start_ticks",
]

COOKIE_ENV = "GPUCI_INTERPRETER"
GRACE_S = 2.0  # between SIGTERM and SIGKILL of a leftover
KILL_WAIT_S = 1.0  # how long SIGKILLed leftovers may take to die, to reap them
CMDLINE_CAP = 400  # characters of a command line kept for run.json
PR_SET_CHILD_SUBREAPER = 36  # from <linux/prctl.h>
PROC = Path("/proc")
_TICK_S = 0.02  # how often the grace period looks whether the signalled have gone
_ROUNDS = 3  # a leftover may start another while it dies: look again, but not forever


class _HasPid(Protocol):
    @property
    def pid(self) -> int: ...


# a Popen (whose handle collects its exit status)
_Child = TypeVar("_Child", bound=_HasPid)
_children_lock = threading.Lock()  # held while a child starts, and while orphans are reaped
_waited_for: set[int] = set()  # gpuci's children whose Popen collects their exit status
_subreaper = False  # become_subreaper() succeeded in this process


@dataclass(frozen=True, slots=True)
class _Proc:
    """One process as /proc/PID/stat shows it; its pid and start time name it uniquely."""

    pid: int
    ppid: int
    session: int
    zombie: bool
    start_ticks: int  # clock ticks after boot


def become_subreaper() -> bool:
    """Make gpuci adopt the orphans of its descendants (Linux); False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        args = (ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
        done = int(libc.prctl(PR_SET_CHILD_SUBREAPER, *args)) == 0
    except (OSError, AttributeError):  # no libc to load, or no prctl in it
        return False
    global _subreaper  # noqa: PLW0603 -- a property of the whole process, like the prctl
    _subreaper = _subreaper or done
    return done


def start_child(start: Callable[[], _Child]) -> _Child:
    """Start a child whose Popen collects its exit status, so `reap_orphans` leaves it be.

    Once gpuci is a subreaper, a child it starts while interpreters run (in any thread)
    must start through here: an orphan's zombie and a quick child's look alike.
    """
    with _children_lock:
        child = start()
        _waited_for.add(child.pid)
    return child


def forget_child(pid: int) -> None:
    """The child's Popen has collected its exit status (or never will)."""
    with _children_lock:
        _waited_for.discard(pid)


def reap_orphans() -> int:
    """Collect every zombie gpuci adopted as a subreaper, none it started; how many."""
    if not _subreaper:
        return 0
    me, reaped = os.getpid(), 0
    with _children_lock:
        for proc in _scan().values():
            if proc.ppid == me and proc.zombie and proc.pid not in _waited_for:
                with contextlib.suppress(ChildProcessError):  # by its own pid only
                    reaped += os.waitpid(proc.pid, os.WNOHANG)[0] == proc.pid
    return reaped


def new_cookie() -> str:
    """A fresh value of COOKIE_ENV for one interpreter."""
    return uuid.uuid4().hex


def end_leftovers(cookie: str, *, interpreter: int, grace: float = GRACE_S) -> list[Leftover]:
    """End every process the interpreter of `cookie` left behind: SIGTERM, grace, SIGKILL.

    `interpreter` is its pid, which is also its session id (start_new_session=True).
    Call it once the interpreter has exited, waited for or not.
    """
    return _end(lambda: _attributed(cookie, interpreter), grace)


def end_recorded(
    cookies: Collection[str], started: Collection[tuple[int, int]], *, grace: float = GRACE_S
) -> list[Leftover]:
    """End what a killed gpuci left running, wherever it is now: every process holding one
    of its interpreters' `cookies`, and each recorded (pid, start time) still running; a
    pid that names another process by now (another start time) is left be."""
    me = os.getpid()

    def found() -> list[_Proc]:
        procs = _scan().values()
        return [
            p
            for p in procs
            if p.pid != me and ((p.pid, p.start_ticks) in started or _cookie_of(p.pid) in cookies)
        ]

    return _end(found, grace)


def start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks after boot): with its pid, it names it for
    good; None where it is gone."""
    proc = _read_stat(pid)
    return proc.start_ticks if proc is not None else None


def _end(find: Callable[[], list[_Proc]], grace: float) -> list[Leftover]:
    """SIGTERM, grace, SIGKILL to what `find` finds, again while it finds more."""
    ended: dict[int, Leftover] = {}
    for _ in range(_ROUNDS):
        found = find()
        _reap(p for p in found if p.zombie)
        live = [p for p in found if not p.zombie and p.pid not in ended]
        if not live:
            break
        uptime = float((PROC / "uptime").read_text(encoding="ascii").split()[0])
        ticks = os.sysconf("SC_CLK_TCK")  # the unit of start times in /proc/PID/stat
        seen = {p.pid: (_cmdline(p.pid), max(0.0, uptime - p.start_ticks / ticks)) for p in live}
        needed_kill = _terminate(live, grace)
        for pid, (cmdline, age) in seen.items():
            ended[pid] = Leftover(pid=pid, cmdline=cmdline, age_s=age, killed=pid in needed_kill)
    return sorted(ended.values(), key=lambda leftover: leftover.pid)


def descendant_pids() -> frozenset[int]:
    """gpuci and every process it runs now (interpreters, all they started)."""
    return frozenset({os.getpid()} | _descendants(_scan(), os.getpid()))


def snapshot_pids() -> frozenset[int]:
    """Every pid now: taken as a check begins, it tells older processes from newer ones."""
    return frozenset(_scan())


def command_line(pid: int) -> str:
    """The process's command line, shell-quoted and capped; "" where unreadable."""
    return _cmdline(pid)


def session_of(pid: int) -> int | None:
    """The process's session id; None where it is gone or this /proc does not show it."""
    proc = _read_stat(pid)
    return proc.session if proc is not None else None


def is_visible(pid: int) -> bool:
    """Whether this /proc shows the process (not: gone, or in another pid namespace)."""
    return _read_stat(pid) is not None


def _attributed(cookie: str, interpreter: int) -> list[_Proc]:
    """gpuci's descendants that the interpreter started: its cookie, or its session."""
    procs = _scan()
    found = []
    for pid in sorted(_descendants(procs, os.getpid())):
        if pid == interpreter or pid in _waited_for:
            continue  # its exit status belongs to the Popen that started it
        held = _cookie_of(pid)
        # Another cookie is another interpreter's, whatever the session: once an
        # interpreter is reaped, its pid may name a new interpreter and its session.
        if held == cookie or (held is None and procs[pid].session == interpreter):
            found.append(procs[pid])
    return found


def _terminate(procs: list[_Proc], grace: float) -> set[int]:
    """SIGTERM, up to `grace` seconds, then SIGKILL; the pids that needed SIGKILL."""
    for proc in procs:
        _signal(proc, signal.SIGTERM)
    stubborn = _wait_gone(procs, grace)
    for proc in stubborn:
        _signal(proc, signal.SIGKILL)
    _wait_gone(stubborn, KILL_WAIT_S)
    _reap(procs)  # a leftover's dead child re-parents to gpuci only as the leftover dies
    return {proc.pid for proc in stubborn}


def _wait_gone(procs: list[_Proc], timeout: float) -> list[_Proc]:
    """Those of the processes still running when all others ended or `timeout` passed."""
    deadline = time.monotonic() + timeout
    while True:
        procs = [proc for proc in procs if _running(proc)]
        if not procs or time.monotonic() >= deadline:
            return procs
        time.sleep(_TICK_S)


def _running(proc: _Proc) -> bool:
    """Whether the process still runs; a zombie of gpuci's is reaped on the way."""
    now = _read_stat(proc.pid)
    if now is None or now.start_ticks != proc.start_ticks:
        return False  # gone, and its pid may name another process by now
    if now.zombie and now.ppid == os.getpid():
        # By its own pid: never another's. A thread-group leader shows as a zombie while
        # its other threads still exit (a CUDA process tearing down its context): it is
        # gone only once waitpid collects it.
        try:
            reaped, _ = os.waitpid(proc.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return reaped == 0
    return not now.zombie


def _reap(procs: Iterable[_Proc]) -> None:
    """Collect the exit status of those that are gpuci's zombies."""
    for proc in procs:
        _running(proc)


def _signal(proc: _Proc, signum: int) -> None:
    if _running(proc):  # checked just before: a pid that names another process is left be
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signum)


def _scan() -> dict[int, _Proc]:
    """Every process now, from one pass over /proc; none where there is no /proc."""
    if not PROC.is_dir():
        return {}
    procs = (_read_stat(int(path.name)) for path in PROC.iterdir() if path.name.isdigit())
    return {proc.pid: proc for proc in procs if proc is not None}


def _read_stat(pid: int) -> _Proc | None:
    try:
        text = (PROC / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
        fields = text.rpartition(")")[2].split()  # the command name may hold spaces and ")"
        dead = fields[0] in ("Z", "X") and not _other_threads_live(pid)
        return _Proc(pid, int(fields[1]), int(fields[3]), dead, int(fields[19]))
    except (OSError, IndexError, ValueError):  # gone
        return None


def _other_threads_live(pid: int) -> bool:
    """Whether a thread other than the leader still runs: a process whose main thread
    ended (a CUDA process tearing down its context) shows as a zombie until they all do."""
    for task in _tasks(pid):
        if task.name != str(pid):
            with contextlib.suppress(OSError, IndexError):
                state = (task / "stat").read_text(encoding="utf-8", errors="replace")
                if state.rpartition(")")[2].split()[0] not in ("Z", "X"):
                    return True
    return False


def _tasks(pid: int) -> list[Path]:
    """The process's threads' /proc directories; none when it is gone."""
    try:
        return sorted((PROC / str(pid) / "task").iterdir())
    except OSError:
        return []


def _read_any_thread(pid: int, name: str) -> bytes:
    """/proc/PID/<name>, else the first thread's that has one (a dead leader's is empty)."""
    for where in (PROC / str(pid), *_tasks(pid)):
        with contextlib.suppress(OSError):
            if data := (where / name).read_bytes():
                return data
    return b""


def _descendants(procs: Mapping[int, _Proc], root: int) -> set[int]:
    """The pids whose chain of parents leads to `root`."""
    children: dict[int, list[int]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found: set[int] = set()
    todo = [root]
    while todo:  # parents form a tree: no pid is its own ancestor
        below = children.get(todo.pop(), [])
        found.update(below)
        todo += below
    return found


def _cookie_of(pid: int) -> str | None:
    """The process's COOKIE_ENV; None: not set, or unreadable (another user's, setuid)."""
    prefix = f"{COOKIE_ENV}=".encode()
    entries = _read_any_thread(pid, "environ").split(b"\0")
    held = [entry[len(prefix) :] for entry in entries if entry.startswith(prefix)]
    return held[0].decode(errors="replace") if held else None


def _cmdline(pid: int) -> str:
    """The process's command line, shell-quoted and capped; "" where unreadable."""
    raw = _read_any_thread(pid, "cmdline")
    args = raw.rstrip(b"\0").split(b"\0") if raw else []  # a zombie's is empty
    text = shlex.join(arg.decode(errors="replace") for arg in args)
    return text if len(text) <= CMDLINE_CAP else text[: CMDLINE_CAP - 3] + "..."
