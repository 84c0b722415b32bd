"""The device side of a snapshot: what CuPy and PyTorch hold and have set, where loaded.

Child side. A library is probed only where the suite imported it (`sys.modules`), and its
device only where the suite already started CUDA in this process. CuPy's is asked of the
driver (`cuCtxGetCurrent`, which neither initializes CUDA nor creates a context: before
`cuInit` it fails, after it says 0 until a context is current). Where CUDA started but no
context is current (a test set a pool limit and allocated nothing: CuPy's pool asks the
runtime only which device is current), the pool's bookkeeping and the current device are
read, which ask for nothing more; the stream, a sticky error and the FFT plans only where a
context is current. PyTorch's is `torch.cuda.is_initialized()` (its initialization creates
the context). The library settings (CuPy's accelerators, PyTorch's backends' flags, the
default dtype) are host-side reads. Nothing here synchronizes a device: a sticky error is
read from a stream query, which does not wait.
"""

from __future__ import annotations

import enum
import importlib.util
import os
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuci.state.host import Snapshot

# each gpuci interpreter's own value, inherited by all it starts (`gpuci.run.proc.reaper`'s
# COOKIE_ENV: that module is the check's, not loaded in its interpreters)
COOKIE_ENV = "GPUCI_INTERPRETER"
NOT_READY = 600  # cudaErrorNotReady: work still queued, not an error
DEFAULT_STREAMS = (0, 1, 2)  # the legacy null stream, cudaStreamLegacy, cudaStreamPerThread
CUPY_LIMIT_ENV = "CUPY_GPU_MEMORY_LIMIT"  # CuPy's pools' first limit: bytes, or `N%`
MAX_ANCESTORS = 64


def device_snapshot(*, processes: bool) -> Snapshot:
    """CuPy's and PyTorch's state, where each is loaded; `processes`: the other processes
    on this device too (NVML, where pynvml is installed: costs more, per file only)."""
    snap: Snapshot = {}
    cupy = sys.modules.get("cupy")
    torch = sys.modules.get("torch")
    for name, module, probe in (("cupy", cupy, _cupy), ("torch", torch, _torch)):
        if module is None:
            continue
        try:
            # a setting the probe reads may be deprecated (CuPy 14's enable_nd_planning): its
            # warning is neither the test's nor, under the suite's `error::DeprecationWarning`,
            # a reason to read nothing
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                snap.update(probe(module))
        except Exception as exc:  # a probe never fails the test it follows
            snap[f"{name}.unreadable"] = f"{type(exc).__name__}: {exc}"[:200]
    device = snap.get("cupy.device", snap.get("torch.device"))
    if processes and isinstance(device, int):
        try:
            snap["gpu.processes"] = _other_processes(device)
        except Exception as exc:  # NVML missing its library, a device it cannot see
            snap["gpu.processes"] = f"unreadable: {type(exc).__name__}"
    return snap


def _cupy(cupy: Any) -> Snapshot:
    snap: Snapshot = {}
    # where CuPy keeps them (its _core re-exports them in some versions only)
    core = sys.modules.get("cupy._core._accelerator") or getattr(cupy, "_core", None)
    for kind in ("routine", "reduction"):
        get = getattr(core, f"get_{kind}_accelerators", None)
        if get is not None:
            snap[f"cupy.{kind}_accelerators"] = ",".join(map(str, get()))
    fft = sys.modules.get("cupy.fft.config")
    if fft is not None:
        snap["cupy.fft"] = (
            f"nd_planning={getattr(fft, 'enable_nd_planning', '?')},"
            f"multi_gpus={getattr(fft, 'use_multi_gpus', '?')}"
        )
    cuda = _cupy_cuda(cupy)
    if cuda is Cuda.NOT_STARTED or (cuda is Cuda.NO_CONTEXT and _pool_asks_the_device()):
        return snap
    # without a context this may make CuPy's per-device pools (host objects its first use
    # would make): they take CUPY_GPU_MEMORY_LIMIT as it is now, not as a test might set it
    # later, after CUDA started and before its first allocation
    pool = cupy.get_default_memory_pool()
    snap["cupy.pool_used"] = int(pool.used_bytes())
    snap["cupy.pool_total"] = int(pool.total_bytes())
    snap["cupy.pool_limit"] = int(pool.get_limit())
    runtime = cupy.cuda.runtime
    snap["cupy.device"] = int(runtime.getDevice())
    if cuda is Cuda.NO_CONTEXT:
        return snap
    stream = int(cupy.cuda.get_current_stream().ptr)
    snap["cupy.stream"] = "default" if stream in DEFAULT_STREAMS else f"0x{stream:x}"
    snap["cuda.error"] = _sticky_error(runtime)
    if fft is not None:
        cache = fft.get_plan_cache()  # this device's: a context exists already
        snap["cupy.fft_plans"] = int(cache.get_curr_size())
    return snap


class Cuda(enum.Enum):
    """How far the suite took CUDA in this process."""

    NOT_STARTED = "not started"  # no CUDA call yet: nothing may be asked
    NO_CONTEXT = "no context"  # the driver initialized, no context current on this thread
    CONTEXT = "context"


def _cupy_cuda(cupy: Any) -> Cuda:
    """How far CUDA got, from the driver; any other failure than the driver's own (an API
    CuPy lacks) is raised, so that the snapshot says `unreadable`."""
    try:
        return Cuda.CONTEXT if cupy.cuda.driver.ctxGetCurrent() else Cuda.NO_CONTEXT
    except Exception as exc:
        if type(exc).__name__ == "CUDADriverError":  # not initialized: nothing ran yet
            return Cuda.NOT_STARTED
        raise


def _pool_asks_the_device(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether CuPy's pool, made where none was, would ask the device for its memory (a
    context): its default limit is a share of the device's memory (`CUPY_GPU_MEMORY_LIMIT`
    ending in `%`). Then where no context exists yet, no pool does either."""
    return environ.get(CUPY_LIMIT_ENV, "").strip().endswith("%")


def fresh_pool_limit(environ: Mapping[str, str] = os.environ) -> int | None:
    """The limit CuPy's pool starts with in this process (`CUPY_GPU_MEMORY_LIMIT` in bytes,
    else 0: none); None where it is a share of the device's memory (unknown here)."""
    limit = environ.get(CUPY_LIMIT_ENV, "").strip()
    if not limit:
        return 0
    return int(limit) if limit.isdigit() else None


def _sticky_error(runtime: Any) -> str:
    """The error a stream query returns (an illegal address stays for the process's life),
    or "": the query waits for nothing."""
    try:
        status = runtime.streamQuery(0)
    except Exception as exc:  # a CuPy that raises for every status but success
        text = f"{type(exc).__name__}: {exc}"
        return "" if "NotReady" in text else text[:200]
    if status in (0, NOT_READY, None):
        return ""
    try:
        return f"{runtime.getErrorName(status)}: {runtime.getErrorString(status)}"[:200]
    except Exception:
        return f"CUDA error {status}"


def _torch(torch: Any) -> Snapshot:
    backends = torch.backends
    snap: Snapshot = {
        "torch.cudnn.deterministic": bool(backends.cudnn.deterministic),
        "torch.cudnn.benchmark": bool(backends.cudnn.benchmark),
        "torch.cudnn.allow_tf32": bool(backends.cudnn.allow_tf32),
        "torch.matmul.allow_tf32": bool(backends.cuda.matmul.allow_tf32),
        "torch.default_dtype": str(torch.get_default_dtype()),
        "torch.deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
    }
    cuda = torch.cuda
    if not cuda.is_initialized():  # every call below would initialize it
        return snap
    snap["torch.allocated"] = int(cuda.memory_allocated())
    snap["torch.reserved"] = int(cuda.memory_reserved())
    # the cap `set_per_process_memory_fraction` leaves on every later allocation (older
    # PyTorch has the setter only)
    fraction = getattr(cuda, "get_per_process_memory_fraction", None)
    if fraction is not None:
        snap["torch.memory_fraction"] = float(fraction())
    snap["torch.device"] = int(cuda.current_device())
    stream = cuda.current_stream()
    snap["torch.stream"] = "default" if stream.cuda_stream in DEFAULT_STREAMS else str(stream)
    try:
        stream.query()  # does not wait; a sticky error raises here
    except RuntimeError as exc:
        snap["cuda.error"] = str(exc).splitlines()[0][:200]
    return snap


_NVML: list[Any] = []  # pynvml, initialized once per process (where installed)


def _other_processes(device: int) -> frozenset[str]:
    """The processes this interpreter started that hold memory on its current device (NVML):
    what a test here can leave there. Not the check's other interpreters beside it (a
    pair's partner, a parallel screen's file: each has a cookie of its own), not a
    stranger's (no cookie: the run's stranger watch tells those), and nothing where NVML's
    process ids are not this process's namespace's (a container's: they would name others)."""
    if not _NVML:
        if importlib.util.find_spec("pynvml") is None:
            _NVML.append(None)
        else:
            nvml: Any = importlib.import_module("pynvml")
            nvml.nvmlInit()
            _NVML.append(nvml)
    nvml = _NVML[0]
    if nvml is None:
        return frozenset()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    names = [v.strip() for v in visible.split(",") if v.strip()]
    index = names[device] if device < len(names) else str(device)
    handle = (
        nvml.nvmlDeviceGetHandleByIndex(int(index))
        if index.isdigit()
        else nvml.nvmlDeviceGetHandleByUUID(index)
    )
    listed = {int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    own = os.getpid()
    if own not in listed and not _in_root_pid_namespace():
        return frozenset()
    cookie = os.environ.get(COOKIE_ENV)
    return frozenset(  # no sizes: they move while a process runs
        f"pid {pid}" for pid in sorted(listed) if pid != own and started_here(pid, own, cookie)
    )


def started_here(pid: int, own: int, cookie: str | None) -> bool:
    """Whether the interpreter `own` started `pid`, or a test in it did: `pid` carries its
    `cookie` (COOKIE_ENV, inherited by all it starts) or descends from it. The check's other
    interpreters carry cookies of their own: a PyTorch suite's hold the GPU from their
    import, and a pair's partner runs beside its victim by design; neither is left by a
    test here."""
    if cookie is not None and _cookie_of(pid) == cookie:
        return True
    return own in _ancestors(pid)


def _cookie_of(pid: int) -> str | None:
    """`pid`'s COOKIE_ENV (None: unset, or its environment unreadable: gone, another
    user's)."""
    prefix = f"{COOKIE_ENV}=".encode()
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    found = [e[len(prefix) :] for e in environ.split(b"\0") if e.startswith(prefix)]
    return found[0].decode(errors="replace") if found else None


def _ancestors(pid: int) -> list[int]:
    """`pid`'s parent, its parent's, ... up to the first unreadable one (at most 64)."""
    found: list[int] = []
    while len(found) < MAX_ANCESTORS:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rpartition(")")[2].split()[1])  # after the name, which may hold ")"
        except (OSError, ValueError, IndexError):
            break
        if pid <= 0:
            break
        found.append(pid)
    return found


def _in_root_pid_namespace() -> bool:
    """Whether this process sees the machine's process ids (NVML's): `NSpid` in
    /proc/self/status lists one id per nested namespace."""
    try:
        for line in (Path("/proc/self/status")).read_text().splitlines():
            if line.startswith("NSpid:"):
                return len(line.split()) == 2
    except OSError:
        pass
    return False
