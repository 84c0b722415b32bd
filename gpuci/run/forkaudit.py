"""Fork audit: what an import leaves that a forked child would not get as a fresh one does.

The pre-imported parent (`gpuci.run.preimport`) takes a `snapshot()` before and after each
import and refuses a module whose import `left_behind` something a fork cannot copy
faithfully: a Python thread, an OS thread of a library that does not re-create its pool
in a child, a child process, a signal handler, an open descriptor, or a read of
`sys.argv` (each child has its own). It records, with `Watch`, every environment
variable the imports read through `os.environ` (and `os.getenv`) and every call that
seeded `random` or NumPy's global generator: a child compares those variables with its
own environment (`differing_reads`) and keeps a seeded generator's state.

It imports nothing of gpuci: the parent and the forked children's plugin both use it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.abc
import importlib.util
import os
import random
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Libraries whose thread pools a fork re-creates in the child (pthread_atfork handlers):
# the BLAS and OpenMP runtimes NumPy, SciPy and PyTorch load at import.
FORK_AWARE_POOLS = ("openblas", "libgomp", "libomp", "libiomp", "mkl_", "blis", "flexiblas")
CUDA_ERROR_NOT_INITIALIZED = 3
GPUCI_VARIABLES = "GPUCI_"  # gpuci's own, different in every interpreter by design
RUNS_FRESH = "this interpreter runs again fresh"  # how a forked child says it stopped
# signals whose handlers only the child's own interpreter could have set up
_SIGNALS = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]


@dataclass(frozen=True, slots=True)
class State:
    """What a fork would have to copy, at one moment of the parent's imports."""

    threads: dict[int, str]  # Python threads: ident -> name
    tasks: int  # OS threads
    children: frozenset[int]
    handlers: dict[int, Any]
    fds: dict[str, str]  # descriptor -> what it is
    libraries: frozenset[str]  # shared objects mapped


def _tasks() -> list[str]:
    with contextlib.suppress(OSError):
        return [p.name for p in Path("/proc/self/task").iterdir()]
    return []


def children() -> frozenset[int]:
    """This process's children, as each of its threads' /proc entry lists them; where the
    kernel keeps no such lists (built without CONFIG_PROC_CHILDREN, as on the GPU machines
    gpuci was measured on), every process whose parent it is."""
    if not Path(f"/proc/self/task/{os.getpid()}/children").exists():
        return children_by_parent()
    found: set[int] = set()
    for task in _tasks():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            text = Path(f"/proc/self/task/{task}/children").read_text(encoding="ascii")
            found.update(int(p) for p in text.split())
    return frozenset(found)


def children_by_parent() -> frozenset[int]:
    """Every process whose /proc stat names this one its parent."""
    me = os.getpid()
    found: set[int] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):  # gone, or not a process
            if int(stat.read_text().rpartition(")")[2].split()[1]) == me:
                found.add(int(stat.parent.name))
    return frozenset(found)


def _fds() -> dict[str, str]:
    fds: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for entry in Path("/proc/self/fd").iterdir():
            with contextlib.suppress(OSError):
                fds[entry.name] = str(entry.readlink())
    return fds


def _libraries() -> frozenset[str]:
    with contextlib.suppress(OSError):
        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
        return frozenset(
            Path(parts[5]).name
            for parts in (line.split(maxsplit=5) for line in maps.splitlines())
            if len(parts) == 6 and ".so" in parts[5]
        )
    return frozenset()


def snapshot() -> State:
    """The parent's state now."""
    handlers: dict[int, Any] = {}
    for signum in _SIGNALS:
        with contextlib.suppress(OSError, ValueError):
            handlers[signum] = signal.getsignal(signum)
    fds = _fds()
    return State(
        threads={t.ident or 0: t.name for t in threading.enumerate()},
        tasks=len(_tasks()),
        children=children(),
        handlers=handlers,
        fds=fds,
        libraries=_libraries(),
    )


def left_behind(before: State, after: State) -> list[str]:
    """What happened between two snapshots that a forked child would not have."""
    left: list[str] = []
    started = [name for ident, name in after.threads.items() if ident not in before.threads]
    left += [f"a thread ({name!r})" for name in started]
    new = after.libraries - before.libraries
    pools = [lib for lib in new if any(pool in lib for pool in FORK_AWARE_POOLS)]
    os_threads = after.tasks - before.tasks - len(started)
    if os_threads > 0 and not pools:
        left.append(f"{os_threads} OS thread(s) of a library that a fork does not re-create")
    left += [f"a child process (pid {pid})" for pid in sorted(after.children - before.children)]
    left += [
        f"a {signal.Signals(s).name} handler"
        for s, handler in after.handlers.items()
        if before.handlers.get(s) is not handler and before.handlers.get(s) != handler
    ]
    # a new descriptor that stays open is shared by every child, its offset too (the
    # listing's own descriptor is closed again by now)
    opened = [
        target for fd, target in after.fds.items() if fd not in before.fds and _stays_open(fd)
    ]
    left += [f"an open descriptor ({target})" for target in opened]
    return left


def _stays_open(fd: str) -> bool:
    try:
        os.fstat(int(fd))
    except (OSError, ValueError):
        return False
    return True


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


class _WatchedArgv(list):  # type: ignore[type-arg]
    """sys.argv that notes a read: every child has its own arguments."""

    watch: Watch

    def _read(self) -> None:
        self.watch.argv_read = True

    def __reduce__(self) -> tuple[Any, ...]:  # a spawned process gets a plain list
        self._read()
        return (list, (list.copy(self),))

    def __getitem__(self, index: Any) -> Any:
        self._read()
        return super().__getitem__(index)

    def __iter__(self) -> Iterator[Any]:
        self._read()
        return super().__iter__()

    def __len__(self) -> int:
        self._read()
        return super().__len__()

    def __contains__(self, item: object) -> bool:
        self._read()
        return super().__contains__(item)


@dataclass(slots=True)
class Watch:
    """The parent's imports watched: environment reads, seeds, reads of sys.argv."""

    reads: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # var -> value, by
    seeded: dict[str, str] = field(default_factory=dict)  # generator -> the module that seeded
    argv_read: bool = False
    module: str = ""  # the module being imported now
    _undo: list[Callable[[], None]] = field(default_factory=list)

    def start(self, argv0: str) -> None:
        """Watch `os.environ`, `sys.argv` (set to what `python -m pytest` gives) and seeds."""
        watch = self
        environ_type = type(os.environ)

        class Watched(environ_type):  # type: ignore[valid-type,misc]
            def __getitem__(self, key: str) -> str:
                try:
                    value: str = super().__getitem__(key)
                except KeyError:
                    watch.note_read(key, None)
                    raise
                watch.note_read(key, value)
                return value

        os.environ.__class__ = Watched
        self._undo.append(lambda: setattr(os.environ, "__class__", environ_type))
        argv = _WatchedArgv([argv0])
        argv.watch = self
        sys.argv = argv
        self.watch_seed("random", random)
        self.watch_seed_on_import("numpy.random")  # NumPy's global generator

    def audited_import(self, name: str) -> list[str]:
        """Import `name`; what it left that a fork would not copy (empty: nothing)."""
        self.module = name
        before = snapshot()
        try:
            importlib.import_module(name)
        finally:
            self.module = ""
        left = left_behind(before, snapshot())
        if self.argv_read:  # every child has arguments of its own
            left.append("a read of sys.argv")
            self.argv_read = False
        return left

    def watch_seed(self, name: str, module: Any) -> None:
        """Note who calls `module.seed` (a seeded generator's state is kept in the child)."""
        original = getattr(module, "seed", None)
        if original is None or getattr(original, "gpuci_watched", False):
            return

        def seed(*args: Any, **kwargs: Any) -> Any:
            self.seeded.setdefault(name, self.module or "?")
            return original(*args, **kwargs)

        seed.gpuci_watched = True  # type: ignore[attr-defined]
        module.seed = seed
        self._undo.append(lambda: setattr(module, "seed", original))

    def watch_seed_on_import(self, name: str) -> None:
        """Watch `name.seed` as soon as `name` is imported (an import can seed it at once)."""
        module = sys.modules.get(name)
        if module is not None:
            self.watch_seed(name, module)
            return
        finder = _AfterImport(name, lambda loaded: self.watch_seed(name, loaded))
        sys.meta_path.insert(0, finder)

        def unwatch() -> None:
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)

        self._undo.append(unwatch)

    def note_read(self, key: str, value: str | None) -> None:
        """An environment variable read by the module being imported (the first read)."""
        if self.module:
            self.reads.setdefault(key, (value, self.module))

    def stop(self) -> None:
        """Put `os.environ`, the seeds and `sys.argv` back as they were."""
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        sys.argv = list(sys.argv.copy()) if isinstance(sys.argv, list) else sys.argv


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls `then(module)` once `name` has been executed, before its importer goes on."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once: the real finders find it
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is not None and hasattr(loader, "exec_module"):
            run = loader.exec_module

            def exec_module(module: Any) -> None:
                run(module)
                self.then(module)

            loader.exec_module = exec_module
        return spec


def differing_reads(
    reads: Mapping[str, tuple[str | None, str]], environ: Mapping[str, str]
) -> list[str]:
    """The variables a preloaded module read at import that `environ` has otherwise:
    `FID_MODE (fid_env read it at import)`."""
    return [
        f"{key} ({module} read it at import)"
        for key, (value, module) in sorted(reads.items())
        if not key.startswith(GPUCI_VARIABLES) and environ.get(key) != value
    ]
