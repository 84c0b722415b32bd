"""Load CUDA C++ kernels from ``kernels/<name>.cu`` at run time, once per process."""

from __future__ import annotations

import threading
from pathlib import Path
from types import ModuleType
from typing import Any

KERNEL_DIR = Path(__file__).resolve().parent
# -I lets every .cu include common.cuh; C++17 for `if constexpr`-era templates.
COMPILE_OPTIONS = ("--std=c++17", f"-I{KERNEL_DIR}")
# Above 48 KiB a kernel must opt in to dynamic shared memory.
DEFAULT_SHARED_LIMIT = 48 * 1024

_lock = threading.Lock()
_sources: dict[str, str] = {}
_kernels: dict[tuple[str, str, int], Any] = {}


class KernelUnavailableError(RuntimeError):
    """CuPy is missing, so no kernel can be compiled or launched."""


def import_cupy() -> ModuleType:
    """Import CuPy on first use; a clear error where it is not installed."""
    try:
        import cupy
    except ImportError as exc:
        raise KernelUnavailableError(
            "kernels need CuPy: install cupy-cuda12x or cupy-cuda13x to match your CUDA"
        ) from exc
    return cupy


def read_source(name: str) -> str:
    """The text of ``kernels/<name>.cu`` with a ``#line`` so errors name the real file."""
    path = KERNEL_DIR / f"{name}.cu"
    source = _sources.get(name)
    if source is None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FileNotFoundError(f"no kernel source {path}") from None
        source = f'#line 1 "{path}"\n{text}'
        _sources[name] = source
    return source


def get_kernel(name: str, entry: str, *, shared_bytes: int = 0) -> Any:
    """The compiled ``entry`` (a name expression such as ``softmax_rows<float>``) of ``name``.cu.

    Compiled once per process and device; safe to call from several threads.
    ``shared_bytes`` raises the kernel's dynamic shared-memory limit where it needs more
    than the default 48 KiB.
    """
    cupy = import_cupy()
    device = int(cupy.cuda.runtime.getDevice())
    key = (name, entry, device)
    kernel = _kernels.get(key)
    if kernel is not None:
        return kernel
    with _lock:
        kernel = _kernels.get(key)
        if kernel is None:
            module = cupy.RawModule(
                code=read_source(name), options=COMPILE_OPTIONS, name_expressions=(entry,)
            )
            # get_function compiles and loads; doing it under the lock keeps two threads
            # from compiling the same module at once.
            kernel = module.get_function(entry)
            if shared_bytes > DEFAULT_SHARED_LIMIT:
                kernel.max_dynamic_shared_size_bytes = shared_bytes
            _kernels[key] = kernel
    return kernel
