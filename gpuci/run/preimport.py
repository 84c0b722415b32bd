"""The pre-imported parent: runs in the suite's Python, imports once, forks each interpreter.

gpuci starts it as `python -m gpuci.run.preimport FD` with one end of a SOCK_SEQPACKET socket
pair at FD; one JSON object is one message. It imports pytest and the modules gpuci names,
but none of the suite's own and none pytest imports through its assertion rewriter
(plugins' distributions), checking after each that no CUDA driver state was created
(`cuda_state`), then answers `{"ready": ...}`. For each `{"start": N, "argv":
[...], "env": {...}, "cwd": ...}` (with the write end of the log pipe attached) it forks a
child that becomes a fresh `python -m pytest`: its own session, stdin /dev/null, stdout
and stderr to the log, the environment replaced wholesale, the working directory, the
signal dispositions this process had before importing anything, fresh random seeds. The
child ends through normal interpreter finalization (atexit, module teardown, garbage
collection), so a crash on the way out is the child's exit status. The parent answers
`{"started": N, "pid": P}` once the child has its session, and `{"exited": P,
"returncode": RC}` (as `subprocess.Popen` gives it: -SIGNAL for a signal) when it has
reaped it. When gpuci closes its end, the parent exits.

It imports nothing of gpuci: it must not be in the children's way.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
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
from pathlib import Path
from typing import Any

MAX_PLUGIN_FILES = 200  # a plugin's own modules whose imports are read
MESSAGE_MAX = 1 << 20  # bytes of one request (its environment is the largest part)
TICK_S = 0.02  # how often the parent looks for children that ended
CUDA_ERROR_NOT_INITIALIZED = 3
STARTUP_VARIABLES = "PYTHON"  # variables the interpreter read as it started: must match
_INITIAL_SIGNALS = {  # dispositions as this interpreter started, before any import
    s: signal.getsignal(s)
    for s in signal.valid_signals()
    if s not in (signal.SIGKILL, signal.SIGSTOP)
}


def loaded_libcuda() -> str | None:
    """The path of the CUDA driver library mapped into this process, None where none is."""
    with contextlib.suppress(OSError):
        for line in (
            Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace").splitlines()
        ):
            path = line.split(maxsplit=5)[5] if len(line.split(maxsplit=5)) == 6 else ""
            if Path(path.strip()).name.startswith("libcuda.so"):
                return path.strip()
    return None


def cuda_state() -> str | None:
    """What CUDA state importing created (a forked child could not use it), or None.

    PyTorch: `torch.cuda.is_initialized()`. Every library (CuPy, Numba, JAX, PyTorch): the
    driver, libcuda, once mapped into the process, is asked `cuDeviceGetCount`, which
    answers CUDA_ERROR_NOT_INITIALIZED until someone called `cuInit`. After cuInit a
    fork's child cannot use CUDA (the driver is not fork-safe), and CUDA_VISIBLE_DEVICES
    is already read; `cuDevicePrimaryCtxGetState` then says whether a context exists too.
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):  # a partial or unusual torch: the driver decides
            if torch.cuda.is_initialized():
                return "torch.cuda.is_initialized() is True"
    path = loaded_libcuda()
    if path is None:
        return None  # nothing could have initialized a driver that is not loaded
    try:
        driver = ctypes.CDLL(path)  # the library already mapped: no second copy
        count = ctypes.c_int(0)
        code = int(driver.cuDeviceGetCount(ctypes.byref(count)))
    except (OSError, AttributeError) as exc:
        return f"{path} is loaded and could not be asked whether it was initialized ({exc})"
    if code == CUDA_ERROR_NOT_INITIALIZED:
        return None
    if code != 0:
        return f"the CUDA driver was initialized and failed (cuDeviceGetCount: error {code})"
    active = []
    for ordinal in range(count.value):
        device, flags, on = ctypes.c_int(0), ctypes.c_uint(0), ctypes.c_int(0)
        if int(driver.cuDeviceGet(ctypes.byref(device), ordinal)) == 0:
            state = driver.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(on))
            if int(state) == 0 and on.value:
                active.append(ordinal)
    where = f"; a CUDA context is active on device {', '.join(map(str, active))}" if active else ""
    return f"the CUDA driver was initialized (cuInit){where}"


def _installed() -> list[Path]:
    """Where installed packages live: never the user's own, even inside the rootdir."""
    return [Path(p).resolve() for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]


def is_users(name: str, roots: list[Path]) -> bool:
    """Whether the top-level module of `name` is the suite's own: under a root, not installed."""
    spec = importlib.util.find_spec(name.partition(".")[0])
    if spec is None:
        return False
    places = [spec.origin] if spec.origin not in (None, "built-in", "frozen") else []
    places += list(spec.submodule_search_locations or [])
    for place in places:
        resolved = Path(place).resolve()
        if any(resolved.is_relative_to(p) for p in _installed()):
            continue
        if any(resolved.is_relative_to(root) for root in roots):
            return True
    return False


def module_level_imports(tree: ast.Module) -> list[str]:
    """What a module imports at module level (not in functions), in first-seen order.

    `import a.b` gives `a.b`, `from a.b import c` gives `a.b`; relative imports are left out.
    """
    found: dict[str, None] = {}
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.Import):
            found.update((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found[node.module] = None
        elif isinstance(node, ast.If | ast.Try | ast.With):  # still module level
            todo[:0] = [
                *node.body,
                *getattr(node, "orelse", ()),
                *(s for h in getattr(node, "handlers", ()) for s in h.body),
                *getattr(node, "finalbody", ()),
            ]
    found.pop("__future__", None)
    return list(found)


def _plugins() -> list[importlib.metadata.Distribution]:
    """Every installed distribution with a pytest11 entry point."""
    return [
        dist
        for dist in importlib.metadata.distributions()
        if any(ep.group == "pytest11" for ep in dist.entry_points)
    ]


def rewritten_by_pytest(plugins: list[importlib.metadata.Distribution]) -> set[str]:
    """The top-level modules of the plugins' distributions.

    pytest imports them through its assertion rewriter, and warns (an error under
    `filterwarnings = error`) where one was imported before: they are never preloaded.
    """
    names: set[str] = set()
    for dist in plugins:
        names.update(ep.module.partition(".")[0] for ep in dist.entry_points)
        for file in dist.files or ():
            parts = file.parts
            if len(parts) == 1 and parts[0].endswith(".py"):
                names.add(parts[0][:-3])
            elif len(parts) == 2 and parts[1] == "__init__.py":
                names.add(parts[0])
    return names


def _pytest_builtins() -> list[str]:
    """pytest's own default plugins: `import pytest` leaves some for pytest's start-up."""
    config = sys.modules.get("_pytest.config")
    return [f"_pytest.{name}" for name in getattr(config, "default_plugins", ())]


def plugins_imports(
    plugins: list[importlib.metadata.Distribution], rewritten: set[str]
) -> list[str]:
    """What loading the plugins imports at module level from outside the plugins.

    From each pytest11 entry point, through the modules of its own distribution that it
    imports at module level, to the first module outside them: those (NumPy for
    pytest-run-parallel) are imported plainly, not rewritten, and a fresh interpreter would
    import them as the plugin loads. Never a module the plugin only might import (an
    integration of hypothesis's or jaxtyping's): the parent imports nothing pytest would not.
    """
    found: dict[str, None] = {}
    for dist in plugins:
        files = {
            ".".join(f.with_suffix("").parts).removesuffix(".__init__"): f
            for f in (dist.files or ())
            if f.suffix == ".py"
        }
        todo = [ep.module for ep in dist.entry_points if ep.group == "pytest11"]
        seen: set[str] = set()
        while todo and len(seen) < MAX_PLUGIN_FILES:
            name = todo.pop()
            if name in seen or name not in files:
                continue
            seen.add(name)
            try:
                tree = ast.parse(Path(str(dist.locate_file(files[name]))).read_bytes())
            except (OSError, SyntaxError, ValueError):
                continue
            for imported in module_level_imports(tree):
                if imported.partition(".")[0] in rewritten:
                    todo.append(imported)
                else:
                    found[imported] = None
    return list(found)


def preload(config: dict[str, Any]) -> dict[str, Any]:
    """Import pytest, its plugins and the modules asked for; the `ready` message."""
    roots = [Path(r).resolve() for r in config.get("roots", ())]
    imported: list[str] = []
    missing: list[str] = []
    skipped: list[str] = []
    plugins = _plugins()
    rewritten = rewritten_by_pytest(plugins)
    for name in dict.fromkeys(["pytest", *config.get("modules", ())]):
        try:
            if name.partition(".")[0] in rewritten or is_users(name, roots):
                skipped.append(name)
                continue
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not name.startswith(exc.name):
                return _refuse(f"importing {name} failed: {type(exc).__name__}: {exc}")
            missing.append(name)
            continue
        except BaseException as exc:  # whatever an import raises: fall back
            return _refuse(f"importing {name} failed: {type(exc).__name__}: {exc}")
        state = cuda_state()
        if state is not None:
            return _refuse(f"importing {name} created CUDA state: {state}")
        imported.append(name)
    for name in [*_pytest_builtins(), *plugins_imports(plugins, rewritten)]:
        if name in sys.modules or is_users(name, roots):
            continue
        try:
            importlib.import_module(name)
        except ImportError:
            continue  # an optional import of the plugin's: its child finds it missing too
        except BaseException as exc:  # whatever an import raises: fall back
            return _refuse(f"importing {name} (for a pytest plugin) failed: {exc!r}")
        state = cuda_state()
        if state is not None:
            return _refuse(f"importing {name} (for a pytest plugin) created CUDA state: {state}")
        imported.append(name)
    return {"ready": True, "imported": imported, "missing": missing, "skipped": skipped}


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
        if changed:  # the interpreter read them as it started: a fork would not
            os.close(fds[0])
            why = f"{', '.join(sorted(changed))} differ from the pre-imported parent's"
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
    me = os.getpid()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rpartition(")")[2].split()[1]) == me:
                os.killpg(int(stat.parent.name), signal.SIGKILL)  # its own session's group


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
    random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:  # its global RandomState would repeat in every child
        numpy_random.seed()
    os.write(ready, b"+")
    os.close(ready)


def main() -> None:
    """Preload, say whether ready, serve; a forked child runs pytest and exits as it does."""
    sock = socket.socket(fileno=int(sys.argv[1]))
    try:
        ready = preload(json.loads(sock.recv(MESSAGE_MAX)))
    except Exception as exc:  # whatever went wrong: gpuci falls back
        ready = _refuse(f"the pre-imported parent failed: {type(exc).__name__}: {exc}")
    _send(sock, ready)
    if not ready["ready"] or serve(sock) is None:
        return
    # The forked child: pytest as `python -m pytest` runs it; its SystemExit ends this
    # interpreter normally, atexit handlers and module teardown included.
    runpy.run_module("pytest", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
