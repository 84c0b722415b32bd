"""The device side of a snapshot: what CuPy and PyTorch hold and have set, where loaded.

Child side. A library is probed only where the suite imported it (`sys.modules`), and its
device only where this process already has a CUDA context: CuPy's is asked of the driver
(`cuCtxGetCurrent`, which neither initializes CUDA nor creates a context: before `cuInit`
it fails, after it says 0 until a context is current), PyTorch's is
`torch.cuda.is_initialized()`. The library settings (CuPy's accelerators, PyTorch's
backends' flags, the default dtype) are host-side reads. Nothing here synchronizes a
device: a sticky error is read from a stream query, which does not wait.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from gpuci.state.host import Snapshot

# each gpuci interpreter's own value, inherited by all it starts (`gpuci.run.proc.reaper`'s
# COOKIE_ENV: that module is the check's, not loaded in its interpreters)
COOKIE_ENV = "GPUCI_INTERPRETER"
NOT_READY = 600  # cudaErrorNotReady: work still queued, not an error
DEFAULT_STREAMS = (0, 1, 2)  # the legacy null stream, cudaStreamLegacy, cudaStreamPerThread


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
    if not _cupy_has_context(cupy):
        return snap
    pool = cupy.get_default_memory_pool()
    snap["cupy.pool_used"] = int(pool.used_bytes())
    snap["cupy.pool_total"] = int(pool.total_bytes())
    snap["cupy.pool_limit"] = int(pool.get_limit())
    runtime = cupy.cuda.runtime
    snap["cupy.device"] = int(runtime.getDevice())
    stream = int(cupy.cuda.get_current_stream().ptr)
    snap["cupy.stream"] = "default" if stream in DEFAULT_STREAMS else f"0x{stream:x}"
    snap["cuda.error"] = _sticky_error(runtime)
    if fft is not None:
        cache = fft.get_plan_cache()  # this device's: a context exists already
        snap["cupy.fft_plans"] = int(cache.get_curr_size())
    return snap


def _cupy_has_context(cupy: Any) -> bool:
    """Whether a CUDA context is current on this thread; any other failure than the
    driver's own (an API CuPy lacks) is raised, so that the snapshot says `unreadable`."""
    try:
        return bool(cupy.cuda.driver.ctxGetCurrent())
    except Exception as exc:
        if type(exc).__name__ == "CUDADriverError":  # not initialized: nothing ran yet
            return False
        raise


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
    """The other processes holding memory on this process's current device (NVML)."""
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
    own = os.getpid()
    cookie = os.environ.get(COOKIE_ENV)
    return frozenset(  # no sizes: they move while a process runs
        f"pid {p.pid}"
        for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        if p.pid != own and not another_interpreter(p.pid, cookie)
    )


def another_interpreter(pid: int, cookie: str | None) -> bool:
    """Whether `pid` is another interpreter of gpuci's, or one it started (its COOKIE_ENV
    set, not to this interpreter's `cookie`): the check started it beside this one, no test
    here left it. A PyTorch suite's interpreters hold the GPU from their import: on the
    H100 a file of the suite screen "left" the parallel screen's, and the state ledger
    pointed a search at 9 tests, not 3. One whose environment cannot be read counts."""
    if cookie is None:
        return False
    prefix = f"{COOKIE_ENV}=".encode()
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, another user's, or not this machine's namespace
        return False
    found = [e[len(prefix) :] for e in environ.split(b"\0") if e.startswith(prefix)]
    return bool(found) and found[0].decode(errors="replace") != cookie
