"""The fork server: interpreters forked from a parent that imported the suite's libraries.

A fresh `python -m pytest` spends most of a short file's time importing pytest, NumPy,
CuPy. `serve()` starts `gpuci.run.preimport` once per check in the suite's Python; it imports
pytest, its plugins and the third-party modules the test files import at top level
(`gpuci.run.preloads`), never the suite's own modules or conftest, and checks that no CUDA
driver state was created. `Interpreters` then asks `current()` for it and `spawn`s each
interpreter from it: a `ForkedChild` behaves like the `subprocess.Popen` it replaces (pid,
stdout, poll, wait, returncode), its process group is its pid, and its exit status is the
one the parent reaped and reported. Where the parent cannot be used (an import failed or
created CUDA state, it died) every interpreter starts fresh, after one note line.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuci.model import printable
from gpuci.run.forked import ForkedChild
from gpuci.run.ledger import dying_with_me, note_started
from gpuci.run.preloads import Preloads, modules_to_preload
from gpuci.run.reaper import forget_child, start_child

SERVER = "gpuci.run.preimport"
READY_TIMEOUT_S = 600.0  # the most its imports may take (a cold CUDA library: minutes)
MESSAGE_MAX = 1 << 20
_servers: dict[str, ForkServer] = {}  # by the Python they run in: one per gpuci command
_servers_lock = threading.Lock()


def _say(text: str) -> None:
    print(printable(f"gpuci: {text}"), file=sys.stderr, flush=True)


_said: set[str] = set()


def say_once(text: str) -> None:
    """A note about forking, once per command however many interpreters it concerns."""
    with _servers_lock:
        if text in _said:
            return
        _said.add(text)
    _say(text)


class ForkServer:
    """The pre-imported parent of one Python, and the exit statuses it reports."""

    def __init__(
        self,
        *,
        python: str,
        environ: Mapping[str, str],
        modules: Sequence[str] | Preloads,
        roots: Sequence[Path],
        named: Sequence[str] = (),
        quiet: bool = False,
    ) -> None:
        self.python = python
        # a file's interpreter forks only where its own imports cover the parent's
        self.preloads = modules if isinstance(modules, Preloads) else Preloads(list(modules), {})
        self.quiet = quiet  # started early: what it imported is said once the check goes on
        self.ready_s = 0.0  # how long its imports took
        # the rootdir it was started for (`serve` gives it first): its preloads left out the
        # modules beside the test files up to it, which pytest would find first
        self.rootdir = Path(roots[0]).resolve() if roots else None
        self.named = tuple(named)  # modules --preload named: a missing one gets a note
        self.started_at = time.monotonic()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        # the parent's own stderr, for the note; open as long as the parent lives
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115
        self._lock = threading.Lock()  # one conversation on the socket at a time
        self._statuses: dict[int, int] = {}
        self._started: dict[int, int | str] = {}  # request number -> pid, or why not
        self._number = 0
        self._refusals: set[str] = set()  # why the parent refused a fork, said once each
        self._uncovered = False  # a file started fresh: its imports did not cover the parent's
        self.failure: str | None = None  # why it cannot be used; None while it can
        self.ready: dict[str, Any] | None = None
        self.process: subprocess.Popen[bytes] | None = None
        with theirs:
            try:
                self.process = start_child(
                    lambda: subprocess.Popen(
                        [python, "-m", SERVER, str(theirs.fileno())],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=self.errors,
                        env=dict(environ),
                        pass_fds=(theirs.fileno(),),
                        start_new_session=True,
                    )
                )
            except OSError as exc:  # no such Python: discovery would have said so first
                self._lost(f"could not start {python}: {exc}")
                return
            note_started(self.process.pid)  # the next command ends it, should gpuci die
        config = {"modules": self.preloads.modules, "roots": [str(r) for r in roots]}
        with contextlib.suppress(OSError):  # it died at once: `usable` reads why
            self.sock.send(json.dumps(config).encode())

    def usable(self, stopping: threading.Event | None = None) -> bool:
        """Wait for its imports the first time; whether children can be forked from it."""
        with self._lock:
            if self.ready is None and self.failure is None:
                data, deadline = None, time.monotonic() + READY_TIMEOUT_S
                while data is None and time.monotonic() < deadline:
                    if stopping is not None and stopping.is_set():
                        return False  # gpuci stops: ask again (or not) later
                    readable, _, _ = select.select([self.sock], [], [], 0.25)
                    data = self.sock.recv(MESSAGE_MAX) if readable else None
                if not data:
                    self.ready = {"ready": False, "reason": self._died()}
                else:
                    self.ready = json.loads(data)
                if not self.ready["ready"]:
                    self.failure = str(self.ready["reason"])
                    _say(f"note: fork server off, every interpreter starts fresh: {self.failure}")
                    self._end()
                else:
                    self.ready_s = time.monotonic() - self.started_at
                    if not self.quiet:
                        self._said_ready()
            return self.failure is None

    def keeps(self, rootdir: Path) -> bool:
        """Whether it suits a suite whose rootdir pytest found: one in or below the
        directory it was started for."""
        return self.rootdir is not None and rootdir.resolve().is_relative_to(self.rootdir)

    def say_ready(self) -> None:
        """Say what it imported, where it kept quiet so far (started early): now, where its
        imports are done, else once they are (at its first use)."""
        with self._lock:
            if self.quiet and self.failure is None:
                self.quiet = False
                if self.ready is not None:
                    self._said_ready()

    def _said_ready(self) -> None:
        """One line on what the parent imported (and one on what it could not find)."""
        assert self.ready is not None
        imported = [  # the standard library's and pytest's own are imported too, but say little
            m
            for m in self.ready["imported"]
            if m.partition(".")[0] not in {*sys.stdlib_module_names, "_pytest"}
        ]
        shown = ", ".join(imported[:6]) + (
            f" and {len(imported) - 6} more" if len(imported) > 6 else ""
        )
        _say(f"interpreters fork from a parent that imported {shown} ({self.ready_s:.1f}s)")
        if self.named_missing:
            _say(f"note: --preload: no module named {', '.join(self.named_missing)}; not preloaded")
        if self.ready.get("plugins_off"):
            _say(f"note: pytest plugins not preloaded: {self.ready['plugins_off']}")
        for module, left in self.ready.get("refused", {}).items():
            _say(
                f"note: {module} not preloaded: its import left {left}, which a fork would not copy"
            )

    @property
    def named_missing(self) -> list[str]:
        """The modules --preload named that do not exist (those found in imports: silent)."""
        assert self.ready is not None
        return [m for m in self.ready["missing"] if m in self.named]

    def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        files: Sequence[Path] | None = None,
    ) -> ForkedChild | None:
        """Fork `python -m pytest ...` (argv as Popen would run it) for the test files (or
        folders) `files`; None: start it fresh."""
        if list(argv[:3]) != [self.python, "-m", "pytest"] or not self.usable():
            return None
        if files is not None and not self._covers(files):
            return None
        read, write = os.pipe()
        with self._lock:
            self._number += 1
            number = self._number
            request = {"start": number, "argv": list(argv), "env": dict(env), "cwd": cwd}
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], [write])
            except OSError as exc:
                self._lost(f"could not ask it for an interpreter ({exc})")
            finally:
                os.close(write)
        while self.failure is None and number not in self._started:
            self._pump(0.05)
        answer = self._started.pop(number, None)
        if not isinstance(answer, int):
            os.close(read)
            if isinstance(answer, str) and answer not in self._refusals:
                self._refusals.add(answer)  # once per reason, not once per interpreter
                _say(f"note: interpreters start fresh, not forked: {answer}")
            return None
        return ForkedChild(self, answer, os.fdopen(read, "rb", buffering=0))

    def _covers(self, files: Sequence[Path]) -> bool:
        """Whether the files' own imports cover what the parent imported of theirs; one note
        for the first that does not."""
        assert self.ready is not None
        ready = self.ready
        present = set(ready.get("present", ()))
        imported = [m for m in self.preloads.modules if m in ready["imported"] and m not in present]
        if self.preloads.covered(files, imported, ready.get("brought", {})):
            return True
        if not self._uncovered:
            self._uncovered = True
            _say(
                "note: a file that does not import everything the parent preloaded starts fresh"
                f" (the first: {', '.join(f.name for f in files[:3])})"
            )
        return False

    def returncode(self, pid: int, *, wait: float) -> int | None:
        """The reported exit status of a forked child, None while it runs."""
        if pid not in self._statuses:
            self._pump(wait)
        if pid not in self._statuses and self.failure is not None:
            self._adopted(pid)  # the parent is gone: the child re-parented to gpuci
        return self._statuses.get(pid)

    def close(self) -> None:
        """Hang up: the parent exits; its children, if any, end as their group is killed."""
        with self._lock:
            self._end()
        self.errors.close()

    def _pump(self, wait: float) -> None:
        """Read what the parent reported, waiting up to `wait` seconds for the first word."""
        with self._lock:
            if self.failure is not None:
                return
            timeout = wait
            while True:
                readable, _, _ = select.select([self.sock], [], [], timeout)
                if not readable:
                    return
                data = self.sock.recv(MESSAGE_MAX)
                if not data:
                    self._lost(self._died())
                    return
                message = json.loads(data)
                if "exited" in message:
                    self._statuses[int(message["exited"])] = int(message["returncode"])
                elif "started" in message:
                    self._started[int(message["started"])] = int(message["pid"])
                elif "failed" in message:
                    self._started[int(message["failed"])] = str(message["reason"])
                timeout = 0.0

    def _adopted(self, pid: int) -> None:
        """The exit status of a child whose parent died, where gpuci adopted it (subreaper)."""
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not ours (no subreaper): init reaps it, its status lost
            if not Path(f"/proc/{pid}").exists():
                self._statuses[pid] = -signal.SIGKILL  # gone, how unknown: say killed
            return
        if done:
            self._statuses[pid] = os.waitstatus_to_exitcode(status)

    def _lost(self, why: str) -> None:
        if self.failure is None:
            self.failure = why
            _say(f"note: fork server lost, the next interpreters start fresh: {why}")

    def _died(self) -> str:
        assert self.process is not None
        with contextlib.suppress(subprocess.TimeoutExpired):  # its socket closes as it exits
            self.process.wait(timeout=1)
        self.errors.seek(0)
        last = [line for line in self.errors.read().decode(errors="replace").splitlines() if line]
        how = (
            f"exit status {self.process.returncode}"
            if self.process.returncode is not None
            else "hung up"
        )
        return f"the pre-imported parent ended ({how})" + (f": {last[-1]}" if last else "")

    def _end(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.failure is None:
            self.failure = "closed"
        if self.process is None:
            return
        if self.ready is None:  # still importing: nothing to wait for
            self.process.kill()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        forget_child(self.process.pid)


def serve(
    *,
    python: str,
    environ: Mapping[str, str],
    rootdir: Path,
    files: Sequence[str],
    paths: Sequence[str],
    preload: Sequence[str] | None,
    quiet: bool = False,
) -> ForkServer:
    """Start the fork server of `python`, used by every interpreter until `stop_all()`.

    `files`: the test files, rootdir-relative; `paths`: PATHS as given (the suite's own
    modules live under them or the rootdir); `preload`: the modules to import (--preload),
    None: those the test files and their conftest.py files import.
    """
    tests = [rootdir / f for f in files]
    modules = modules_to_preload(rootdir, tests, preload)
    # gpuci's secrets left its own environment before this (gpuci.run.masking), so they are not
    # in the parent's either, whose block a child's /proc/self/environ shows
    with _servers_lock:
        old = _servers.pop(python, None)
        if old is not None:
            old.close()
        server = _servers[python] = ForkServer(
            python=python,
            environ=environ,
            modules=modules,
            roots=[rootdir, *(Path(p).resolve() for p in paths)],
            named=preload or (),
            quiet=quiet,
        )
    return server


def current(python: str) -> ForkServer | None:
    """The running fork server of `python`, None where there is none (plain interpreters)."""
    with _servers_lock:
        return _servers.get(python)


def stop_all() -> None:
    """End every fork server this gpuci started."""
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.close()


def start_interpreter(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    fresh: bool,
    stopping: threading.Event,
    files: Sequence[Path] | None = None,
) -> subprocess.Popen[bytes] | ForkedChild:
    """Start one interpreter: forked from the server of its Python where there is one and
    `fresh` is not asked for (a wrapper such as compute-sanitizer must exec), else fresh.

    Either way through `start_child`: should the server die, gpuci adopts its children,
    and `reap_orphans` must leave their exit statuses to their handles.
    """
    server = None if fresh else current(argv[0])
    if server is not None and not server.usable(stopping):
        server = None

    def start() -> subprocess.Popen[bytes] | ForkedChild:
        cwd = str(Path.cwd())
        child = server.spawn(argv, env, cwd, files) if server is not None else None
        return child or subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            # a kill -9 of gpuci ends it too; safe beside threads: it only calls a prctl
            # looked up before the fork, getppid and _exit
            preexec_fn=dying_with_me(),  # noqa: PLW1509
        )

    return start_child(start)
