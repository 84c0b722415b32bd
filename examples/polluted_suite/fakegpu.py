"""A pure-Python stand-in for a GPU runtime's process-wide state.

It has no GPU and does no real work; it models the state that makes GPU tests
pass alone and fail together:

- a caching memory pool (like CuPy's) that hands a freed block back to the next
  allocation of the same size without clearing it, and a process-wide pool limit;
- a sticky error: after an illegal memory access every later call in the process
  raises, like a poisoned CUDA context;
- device memory shared by every process on the machine, kept in a JSON ledger of
  bytes per PID under an fcntl lock, so two processes can run out of it together;
- a kernel cache that `compile_kernel` fills and `launch` only reads.

State shared across processes (the ledger, counters) lives in the directory named
by ``FAKEGPU_DIR``, by default ``<tempdir>/fakegpu-<uid>``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import resource
import signal
import tempfile
import time
import weakref
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

DEVICE_BYTES = 1 << 30  # the fake device has 1 GiB
ITEMSIZE = 8  # every buffer holds float64
POLL_S = 0.01  # how often a waiting allocation looks at the ledger again
COMPUTE_CAPABILITY = (6, 0)  # too old for tensor cores, so one test skips
EVENT_TIMEOUT_S = 60.0  # a wait on an event that never completes gives up after this
ELF_MAGIC = b"\x7fELF"


class FakeGpuError(RuntimeError):
    """An error reported by the fake runtime."""


class OutOfMemoryError(FakeGpuError):
    """An allocation did not fit in the pool limit or in device memory."""


class IllegalAddressError(FakeGpuError):
    """A kernel touched memory outside its buffers; the context is poisoned."""


# --- state shared by processes, under FAKEGPU_DIR -------------------------------------


def state_dir() -> Path:
    """The directory holding state shared by processes (created on first use)."""
    default = Path(tempfile.gettempdir()) / f"fakegpu-{os.getuid()}"
    path = Path(os.environ.get("FAKEGPU_DIR") or default)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _locked(name: str) -> Iterator[Path]:
    """Hold an exclusive lock on `name` in the state directory; yield the data file."""
    directory = state_dir()
    with (directory / f"{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield directory / f"{name}.json"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read_json(path: Path) -> dict[str, int]:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return {str(key): int(value) for key, value in data.items()}


def _write_json(path: Path, data: dict[str, int]) -> None:
    # Write then rename, so a process killed mid-write leaves the old ledger intact.
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    tmp.replace(path)


def bump_counter(name: str) -> int:
    """Add one to the counter `name` shared by all processes; return its new value."""
    with _locked(f"counter-{name}") as path:
        data = _read_json(path)
        data["value"] = data.get("value", 0) + 1
        _write_json(path, data)
        return data["value"]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _live_ledger(path: Path) -> dict[str, int]:
    # A process that died (crashed, killed at a timeout) never frees its memory;
    # purging dead PIDs is what the driver does when a process goes away.
    return {pid: used for pid, used in _read_json(path).items() if _pid_alive(int(pid))}


def device_used() -> int:
    """Bytes of device memory held by all live processes."""
    with _locked("device") as path:
        return sum(_live_ledger(path).values())


def _try_reserve(nbytes: int) -> str | None:
    """Reserve `nbytes` for this process; on failure return who holds the memory."""
    with _locked("device") as path:
        ledger = _live_ledger(path)
        used = sum(ledger.values())
        if used + nbytes > DEVICE_BYTES:
            holders = ", ".join(f"PID {pid}: {_mib(n)}" for pid, n in sorted(ledger.items()))
            return f"{_mib(used)} of {_mib(DEVICE_BYTES)} in use ({holders})"
        me = str(os.getpid())
        ledger[me] = ledger.get(me, 0) + nbytes
        _write_json(path, ledger)
        return None


def _release(nbytes: int) -> None:
    with _locked("device") as path:
        ledger = _live_ledger(path)
        me = str(os.getpid())
        left = ledger.get(me, 0) - nbytes
        if left > 0:
            ledger[me] = left
        else:
            ledger.pop(me, None)
        _write_json(path, ledger)


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):.0f} MiB"


class DeviceAllocation:
    """Device memory taken straight from the driver, outside the pool (like a
    library's workspace); free it with `free()` or a `with` block."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self._freed = False

    def free(self) -> None:
        """Give the memory back to the device (once)."""
        if not self._freed:
            self._freed = True
            _release(self.nbytes)

    def __enter__(self) -> DeviceAllocation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()


def device_malloc(nbytes: int, *, wait_s: float = 0.0) -> DeviceAllocation:
    """Take `nbytes` of device memory, waiting up to `wait_s` for other processes."""
    _check_context()
    deadline = time.monotonic() + wait_s
    while (holders := _try_reserve(nbytes)) is not None:
        if time.monotonic() >= deadline:
            raise OutOfMemoryError(f"out of device memory allocating {_mib(nbytes)}: {holders}")
        time.sleep(POLL_S)
    return DeviceAllocation(nbytes)


# --- the process-wide context: a sticky error ------------------------------------------

_sticky_error: IllegalAddressError | None = None


def _check_context() -> None:
    # Like CUDA: once a kernel faulted, the context is unusable until the process exits.
    if _sticky_error is not None:
        raise IllegalAddressError(f"context is poisoned by an earlier error: {_sticky_error}")


def _fault(message: str) -> IllegalAddressError:
    global _sticky_error  # noqa: PLW0603 - the poisoned context is process-wide on purpose
    _sticky_error = IllegalAddressError(f"an illegal memory access was encountered ({message})")
    return _sticky_error


def synchronize() -> None:
    """Wait for the device; raises if the context is poisoned."""
    _check_context()


# --- the caching memory pool ----------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Block:
    nbytes: int
    data: array[float]


class Buffer:
    """A device array of float64 from the pool; its block goes back to the pool when
    the buffer is garbage-collected, as CuPy arrays do."""

    def __init__(self, pool: MemoryPool, block: _Block, size: int) -> None:
        self._block = block
        self.size = size
        weakref.finalize(self, pool._give_back, block)

    def __len__(self) -> int:
        return self.size

    @property
    def data(self) -> array[float]:
        """The device memory itself (kernels write here)."""
        return self._block.data

    def tolist(self) -> list[float]:
        """Copy to the host."""
        _check_context()
        return self._block.data[: self.size].tolist()


class MemoryPool:
    """A caching allocator: freed blocks are kept and handed out again as they are."""

    def __init__(self) -> None:
        self._free: dict[int, list[_Block]] = {}
        self._used = 0
        self._limit = 0  # 0: no limit

    def set_limit(self, size: int) -> None:
        """Cap the bytes in use through this pool for the rest of the process (0: none)."""
        self._limit = size

    def get_limit(self) -> int:
        """The current cap in bytes (0: none)."""
        return self._limit

    def used_bytes(self) -> int:
        """Bytes held by live buffers."""
        return self._used

    def malloc(self, size: int) -> Buffer:
        """A buffer of `size` float64 holding whatever its block last held."""
        _check_context()
        nbytes = size * ITEMSIZE
        if self._limit and self._used + nbytes > self._limit:
            # CuPy's words: a limit the process set is in the message
            raise OutOfMemoryError(
                f"out of memory allocating {nbytes} bytes (allocated so far: {self._used}"
                f" bytes, limit set to: {self._limit} bytes)"
            )
        cached = self._free.get(nbytes)
        if cached:
            block = cached.pop()  # stale: not cleared, as on a real GPU
        else:
            device_malloc(nbytes)  # the pool keeps it until the process exits
            block = _Block(nbytes, array("d", bytes(nbytes)))  # fresh memory reads as zeros
        self._used += nbytes
        return Buffer(self, block, size)

    def _give_back(self, block: _Block) -> None:
        self._used -= block.nbytes
        self._free.setdefault(block.nbytes, []).append(block)


_POOL = MemoryPool()


def get_default_memory_pool() -> MemoryPool:
    """The pool shared by everything in this process."""
    return _POOL


def empty(size: int) -> Buffer:
    """An uninitialized buffer (its contents are whatever the pool had)."""
    return _POOL.malloc(size)


def zeros(size: int) -> Buffer:
    """A buffer of zeros."""
    out = _POOL.malloc(size)
    for i in range(size):
        out.data[i] = 0.0
    return out


def asarray(values: Iterable[float]) -> Buffer:
    """Copy host values to the device."""
    host = [float(v) for v in values]
    out = _POOL.malloc(len(host))
    out.data[: len(host)] = array("d", host)
    return out


# --- kernels ---------------------------------------------------------------------------


def add(a: Buffer, b: Buffer) -> Buffer:
    """Elementwise a + b."""
    out = empty(len(a))
    for i in range(len(a)):
        out.data[i] = a.data[i] + b.data[i]
    return out


def scale(a: Buffer, factor: float) -> Buffer:
    """Elementwise a * factor."""
    out = empty(len(a))
    for i in range(len(a)):
        out.data[i] = a.data[i] * factor
    return out


def total(a: Buffer) -> float:
    """The sum of all elements."""
    _check_context()
    return float(sum(a.data[: len(a)]))


def inclusive_scan(a: Buffer) -> Buffer:
    """Running sums. Bug on purpose: the last element is never accumulated."""
    out = empty(len(a))
    running = 0.0
    for i in range(len(a) - 1):  # off by one: should be range(len(a))
        running += a.data[i]
        out.data[i] = running
    out.data[len(a) - 1] = a.data[len(a) - 1]
    return out


def pad(a: Buffer, multiple: int) -> Buffer:
    """`a` padded with zeros to a multiple of `multiple` elements.

    Bug on purpose: it writes only the first len(a) elements and assumes fresh memory
    is zero, which holds for new blocks and not for ones the pool hands back.
    """
    size = -(-len(a) // multiple) * multiple
    out = empty(size)
    for i in range(len(a)):
        out.data[i] = a.data[i]
    return out


def gather(src: Buffer, index: Iterable[int]) -> Buffer:
    """out[i] = src[index[i]]; an index past the end is an illegal memory access."""
    idx = list(index)
    out = empty(len(idx))
    for i, j in enumerate(idx):
        if not 0 <= j < len(src):
            raise _fault(f"gather read element {j} of a {len(src)}-element buffer")
        out.data[i] = src.data[j]
    return out


# --- a kernel cache ---------------------------------------------------------------------


def _softmax(a: Buffer) -> Buffer:
    top = max(a.data[: len(a)])
    exps = [math.exp(x - top) for x in a.data[: len(a)]]
    whole = sum(exps)
    return asarray(e / whole for e in exps)


def _relu(a: Buffer) -> Buffer:
    return asarray(max(x, 0.0) for x in a.data[: len(a)])


_SOURCES: dict[str, Callable[[Buffer], Buffer]] = {"softmax": _softmax, "relu": _relu}
_KERNEL_CACHE: dict[str, Callable[[Buffer], Buffer]] = {}


def compile_kernel(name: str) -> None:
    """Compile `name` and keep it in the process-wide kernel cache."""
    _check_context()
    if name not in _SOURCES:
        raise FakeGpuError(f"no kernel source named {name!r}")
    time.sleep(0.05)  # compiling is slow: the reason a cache exists
    _KERNEL_CACHE[name] = _SOURCES[name]


def launch(name: str, a: Buffer) -> Buffer:
    """Run a compiled kernel. It looks only in the cache and never compiles."""
    _check_context()
    try:
        kernel = _KERNEL_CACHE[name]
    except KeyError:
        raise FakeGpuError(f"kernel {name!r} is not loaded: compile_kernel() it first") from None
    return kernel(a)


# --- device properties, modules, events, copies -----------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceProperties:
    """What a test may ask of the device."""

    name: str
    total_memory: int
    compute_capability: tuple[int, int]


def device_properties() -> DeviceProperties:
    """The fake device's properties."""
    return DeviceProperties(
        name="FakeGPU 1G", total_memory=DEVICE_BYTES, compute_capability=COMPUTE_CAPABILITY
    )


def load_module(image: bytes) -> None:
    """Load a compiled module. A malformed image makes the driver segfault, killing
    the process for real (no exception reaches Python)."""
    _check_context()
    if not image.startswith(ELF_MAGIC):
        # No core file: the crash is the point, not the dump.
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), signal.SIGSEGV)
        os.abort()  # in case SIGSEGV was somehow survived


class Event:
    """A point in a stream that the host can wait for."""

    def __init__(self) -> None:
        self._recorded = False

    def record(self) -> None:
        """Mark the event complete (the work before it has finished)."""
        self._recorded = True

    def synchronize(self) -> None:
        """Wait until the event completes; a hung kernel never completes it."""
        _check_context()
        deadline = time.monotonic() + EVENT_TIMEOUT_S
        while not self._recorded:
            if time.monotonic() >= deadline:
                raise FakeGpuError(f"event did not complete within {EVENT_TIMEOUT_S:.0f} s")
            time.sleep(0.1)


def copy_to_host_async(a: Buffer) -> list[float]:
    """Start a copy to the host and return the host buffer at once, before the copy
    has landed. Without a `synchronize()` the caller races the copy.

    The race is made deterministic: it is lost on every other call, counted across
    processes in FAKEGPU_DIR, so alone-reruns of a test that forgets to synchronize
    disagree every time.
    """
    _check_context()
    if bump_counter("async-copy") % 2 == 1:
        return [0.0] * len(a)  # the copy had not landed yet
    return a.tolist()
