"""The pre-imported parent: runs in the suite's Python, imports once, forks each interpreter.

gpuci starts it as `python -m gpuci.run.preimport FD` with one end of a SOCK_SEQPACKET socket
pair at FD; one JSON object is one message. It imports pytest and the modules gpuci names,
but none of the suite's own and none pytest imports through its assertion rewriter
(plugins' distributions). It audits each import (`gpuci.run.forkaudit`): one that created
CUDA state makes it unusable; one that left a thread, a child process, a signal handler,
an open descriptor or a read of sys.argv is refused, and the parent starts over without
it. Then it answers `{"ready": ...}` with what it imported, refused, and the environment
variables the imports read. For each `{"start": N, "argv": [...], "env": {...}, "cwd":
...}` (with the write end of the log pipe attached) it forks a child that becomes a fresh
`python -m pytest`: its own session, stdin /dev/null, stdout and stderr to the log, the
environment replaced wholesale, the working directory, the signal dispositions this
process had before importing anything, fresh random seeds (unless an import seeded one);
where a variable an import read differs in the request, it forks nothing and says why.
The child ends through normal interpreter finalization. The parent answers `{"started":
N, "pid": P}`, and `{"exited": P, "returncode": RC}` (as `Popen` gives it) once reaped.

It imports nothing of gpuci but the audit: it must not be in the children's way.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import random
import runpy
import select
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from gpuci.run.forkaudit import Watch, children, cuda_state, differing_reads
from gpuci.run.importables import (
    is_users,
    plugins_imports,
    pytest_builtins,
    pytest_plugins,
    rewritten_by_pytest,
)
from gpuci.run.rewritten import Plugins, blocked_plugins, load_plugins

SELF = "gpuci.run.preimport"
MESSAGE_MAX = 1 << 20  # bytes of one request (its environment is the largest part)
TICK_S = 0.02  # how often the parent looks for children that ended
STARTUP_VARIABLES = "PYTHON"  # variables the interpreter read as it started: must match
MAX_REFUSED = 8  # modules refused one by one before the parent preloads none of them
ORIGINAL_ARGV = list(sys.argv)  # `-m gpuci.run.preimport FD [CONFIG]`, before the watch
WATCH = Watch()  # the imports' environment reads and seeds
# In a forked child: the variables the parent's imports read, for the plugin to compare
# once the child's conftest.py files have run (None in any other interpreter).
FORK_READS: dict[str, tuple[str | None, str]] | None = None
# In a forked child: the pytest plugins the parent loaded, for the plugin to compare once
# pytest has loaded its own (None in any other interpreter, or where none were).
FORK_PLUGINS: Plugins | None = None
PLUGINS = Plugins()  # what this parent loaded through pytest's rewriter
_INITIAL_SIGNALS = {  # dispositions as this interpreter started, before any import
    s: signal.getsignal(s)
    for s in signal.valid_signals()
    if s not in (signal.SIGKILL, signal.SIGSTOP)
}


def preload(config: dict[str, Any]) -> dict[str, Any]:
    """Import pytest, its plugins and the modules asked for, auditing each import; the
    `ready` message. A module whose import left what a fork cannot copy is refused: this
    process starts over without it (`_start_over`), as the state is already here."""
    roots = [Path(r).resolve() for r in config.get("roots", ())]
    refused: dict[str, str] = dict(config.get("refused", {}))
    done = _Preloaded()
    plugins = pytest_plugins()
    rewritten = rewritten_by_pytest(plugins)
    origin = getattr(importlib.util.find_spec("pytest"), "origin", None) or "-m"
    WATCH.start(str(Path(origin).with_name("__main__.py")))  # as `python -m pytest` shows
    asked = list(dict.fromkeys(["pytest", *config.get("modules", ())]))
    present = [m for m in asked if m in sys.modules]  # a fresh interpreter has them too
    for name in asked:
        if name in refused:
            continue
        loaded = set(sys.modules)
        if name.partition(".")[0] in rewritten or is_users(name, roots):
            done.skipped.append(name)
            continue
        try:
            left = WATCH.audited_import(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not name.startswith(exc.name):
                return _refuse(f"importing {name} failed: {type(exc).__name__}: {exc}")
            done.missing.append(name)
            continue
        except BaseException as exc:  # whatever an import raises: fall back
            return _refuse(f"importing {name} failed: {type(exc).__name__}: {exc}")
        if left:
            _start_over(config, {**refused, name: ", ".join(left)})
        why = _imported(done, name, "")
        if why:
            return _refuse(why)
        done.brought[name] = [m for m in asked if m in sys.modules and m not in loaded]
    for name in [*pytest_builtins(), *plugins_imports(plugins, rewritten)]:
        why = _plugins_import(done, name, roots)
        if why:
            return _refuse(why)
    plugins_off = config.get("plugins_off", "")
    if not plugins_off:
        plugins_off = _load_plugins(done, plugins, config, refused)
    PLUGINS.note_brought()
    WATCH.stop()
    present += done.brought.get("pytest", [])  # every child imports pytest, and these with it
    return {
        "ready": True,
        "imported": done.imported,
        "missing": done.missing,
        "skipped": done.skipped,
        "refused": refused,
        "present": present,
        "brought": done.brought,
        "reads": {k: list(v) for k, v in WATCH.reads.items()},
        "seeded": WATCH.seeded,
        "plugins": list(PLUGINS.loaded),
        "plugins_off": plugins_off,
    }


@dataclass(slots=True)
class _Preloaded:  # what preload did with each module
    imported: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    brought: dict[str, list[str]] = field(default_factory=dict)  # the asked-for it imported


def _plugins_import(done: _Preloaded, name: str, roots: list[Path]) -> str:
    """Import what a pytest plugin imports plainly; why the parent cannot be used, or ''."""
    if name in sys.modules or is_users(name, roots):
        return ""
    try:
        left = WATCH.audited_import(name)
    except ImportError:
        return ""  # an optional import of the plugin's: its child finds it missing too
    except BaseException as exc:  # whatever an import raises: fall back
        return f"importing {name} (for a pytest plugin) failed: {exc!r}"
    if left:  # every fresh pytest imports it as the plugin loads: nothing to fork from
        return f"importing {name} (for a pytest plugin) left {', '.join(left)}"
    return _imported(done, name, " (for a pytest plugin)")


def _load_plugins(
    done: _Preloaded,
    plugins: list[importlib.metadata.Distribution],
    config: dict[str, Any],
    refused: dict[str, str],
) -> str:
    """Load the pytest plugins as pytest does, through its rewriter; why not, or ''. Where
    loading went wrong part of the way, this process starts over without it."""
    try:
        loaded, why = load_plugins(plugins, blocked_plugins(os.environ), WATCH.audited_import)
    except BaseException as exc:  # whatever a plugin's import (or pytest's hook) raises
        loaded, why = Plugins(), f"{type(exc).__name__}: {exc}"
    if why:
        _start_over({**config, "plugins_off": why}, refused)
    why = cuda_state() or ""
    if why:
        _start_over({**config, "plugins_off": f"a plugin created CUDA state: {why}"}, refused)
    PLUGINS.loaded, PLUGINS.marked = loaded.loaded, loaded.marked
    done.imported += [getattr(p, "__name__", name) for name, p in loaded.loaded.items()]
    return ""


def _imported(done: _Preloaded, name: str, why: str) -> str:
    """Keep an import that created no CUDA state; else why the parent cannot be used."""
    state = cuda_state()
    if state is not None:
        return f"importing {name}{why} created CUDA state: {state}"
    done.imported.append(name)
    return ""


def _start_over(config: dict[str, Any], refused: dict[str, str]) -> NoReturn:
    """Begin again in a new process image without the refused modules: the threads, handlers
    and descriptors they left cannot be taken back. Their child processes are ended."""
    if len(refused) > MAX_REFUSED:
        config["modules"] = []  # too many to try one by one: pytest and its plugins only
    for pid in children():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    fd = int(ORIGINAL_ARGV[1])
    os.set_inheritable(fd, True)
    again = json.dumps({**config, "refused": refused})
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", SELF, str(fd), again])  # noqa: S606


def _refuse(reason: str) -> dict[str, Any]:
    return {"ready": False, "reason": reason}


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


def serve(sock: socket.socket) -> tuple[dict[str, Any], int] | None:
    """Fork children on request until gpuci hangs up; in a child, its request and log fd."""
    while True:
        readable, _, _ = select.select([sock], [], [], TICK_S)
        _reap(sock)
        if not readable:
            continue
        data, fds, _, _ = socket.recv_fds(sock, MESSAGE_MAX, 1)
        if not data:  # gpuci closed its end (or died): no more children
            _end_children()
            return None
        request = json.loads(data)
        number = request["start"]
        if not fds:
            _send(sock, {"failed": number, "reason": "no log descriptor came with the request"})
            continue
        changed = [
            key
            for key in {*request["env"], *os.environ}
            if key.startswith(STARTUP_VARIABLES) and request["env"].get(key) != os.environ.get(key)
        ]
        why = f"{', '.join(sorted(changed))} differ from the pre-imported parent's"
        if not changed:  # a variable a preloaded module read differs: it would read another
            differing = differing_reads(WATCH.reads, request["env"])
            why = f"{'; '.join(differing)} differs in the interpreter" if differing else ""
        if changed or why:  # the interpreter (or a module) read them as it started
            os.close(fds[0])
            _send(sock, {"failed": number, "reason": why})
            continue
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            sock.close()
            _become(request, fds[0], ready_w)
            return request, fds[0]
        os.close(fds[0])
        os.close(ready_w)
        with contextlib.suppress(OSError):
            os.read(ready_r, 1)  # it has its own session now: its group can be signalled
        os.close(ready_r)
        _send(sock, {"started": number, "pid": pid})


def _end_children() -> None:
    """gpuci hung up or died: end the children still running, each with its process group,
    as a fresh interpreter ends with gpuci (a server killed on its own leaves them to gpuci,
    which adopts them). Its children are found by their parent, never by a pid kept."""
    for pid in children():
        with contextlib.suppress(OSError):  # ended already
            os.killpg(pid, signal.SIGKILL)  # its own session's group


def _reap(sock: socket.socket) -> None:
    """Report every child that ended; this process's only children are the ones it forked."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        with contextlib.suppress(OSError):
            _send(sock, {"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _become(request: dict[str, Any], log: int, ready: int) -> None:
    """Make this forked child what `python -m pytest` started by Popen would be."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    for fd in {null, log}:
        os.close(fd)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for signum, handler in _INITIAL_SIGNALS.items():
        with contextlib.suppress(OSError, ValueError, TypeError):
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    os.environ.clear()  # unsetenv and putenv too: C libraries and subprocesses see it
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    argv = list(request["argv"])
    sys.argv = ["-m", *argv[3:]]  # runpy puts pytest's __main__.py path first, as -m does
    sys.orig_argv = argv
    sys.path[0] = str(Path.cwd())  # `python -m` puts the working directory first
    # a generator a preloaded module seeded keeps its state, as it would after that import
    # in a fresh interpreter; any other would repeat in every child: seeded afresh
    if "random" not in WATCH.seeded:
        random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None and "numpy.random" not in WATCH.seeded:
        numpy_random.seed()
    global FORK_READS, FORK_PLUGINS  # noqa: PLW0603 -- the child's plugin reads them, once
    FORK_READS = dict(WATCH.reads)
    FORK_PLUGINS = PLUGINS
    os.write(ready, b"+")
    os.close(ready)


def main() -> None:
    """Preload, say whether ready, serve; a forked child runs pytest and exits as it does."""
    sock = socket.socket(fileno=int(ORIGINAL_ARGV[1]))
    # the forked child's plugin finds this module (run as __main__) under its own name
    sys.modules[SELF] = sys.modules[__name__]
    try:
        # started over after a refusal: the config comes in argv
        given = ORIGINAL_ARGV[2] if len(ORIGINAL_ARGV) > 2 else sock.recv(MESSAGE_MAX)
        ready = preload(json.loads(given))
    except Exception as exc:  # whatever went wrong: gpuci falls back
        ready = _refuse(f"the pre-imported parent failed: {type(exc).__name__}: {exc}")
    _send(sock, ready)
    if not ready["ready"] or serve(sock) is None:
        # the parent is no test interpreter: the atexit handlers its imports registered
        # (and module teardown) belong to the children that import them
        sys.stderr.flush()
        os._exit(0)
    # The forked child: pytest as `python -m pytest` runs it; its SystemExit ends this
    # interpreter normally, atexit handlers and module teardown included.
    runpy.run_module("pytest", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
