"""A stand-in for CuPy's process-wide device state, as the state ledger's probes meet it:
the three stages CUDA goes through in a process, and what each of CuPy's calls needs.

- Nothing called yet: the driver is not initialized (`ctxGetCurrent` raises
  `CUDADriverError`, as `cuCtxGetCurrent` fails before `cuInit`).
- A runtime call that needs no context (`getDevice`, `getDeviceCount`, the pool's
  bookkeeping and `set_limit(size=...)`, which ask only which device is current) initializes
  the driver: `ctxGetCurrent` says 0.
- A call that needs one (an allocation, a stream, a stream query, `memGetInfo`,
  `setDevice`) creates the context, and with it what a driver opens: its threads' pipes and
  an event descriptor and a socket, kept open for the process's life.

`CONTEXT_MADE_BY` names the call that created the context, so that a test can tell a probe
that created one. Installed as `cupy` (a suite's `cupy.py`, or in `sys.modules`).
"""

from __future__ import annotations

import os
import socket
from typing import Any

DEVICES = 2
DEVICE_BYTES = 1 << 30
DRIVER_DESCRIPTORS: list[int] = []  # what context creation opened, never closed
CONTEXT_MADE_BY: list[str] = []
_stage = {"initialized": False, "context": 0, "device": 0}


class OutOfMemoryError(MemoryError):
    """CuPy's, with its message."""

    def __init__(self, size: int, total: int, limit: int = 0) -> None:
        if limit:
            text = (
                f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes,"
                f" limit set to: {limit:,} bytes)."
            )
        else:
            text = f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes)."
        super().__init__(text)


def _initialize() -> None:
    _stage["initialized"] = True


def _context(call: str) -> None:
    _initialize()
    if _stage["context"]:
        return
    CONTEXT_MADE_BY.append(call)
    _stage["context"] = 0x5581C0
    for reader, writer in (os.pipe(), os.pipe()):  # the driver's threads talk over pipes
        DRIVER_DESCRIPTORS.extend((reader, writer))
    if hasattr(os, "eventfd"):
        DRIVER_DESCRIPTORS.append(os.eventfd(0))
    DRIVER_DESCRIPTORS.append(socket.socket(socket.AF_UNIX).detach())  # NVIDIA's connects one


class _Driver:
    class CUDADriverError(RuntimeError):
        """The driver's error (CUDA_ERROR_NOT_INITIALIZED before cuInit)."""

    def ctxGetCurrent(self) -> int:
        if not _stage["initialized"]:
            raise self.CUDADriverError("CUDA_ERROR_NOT_INITIALIZED: initialization error")
        return _stage["context"]


class _Runtime:
    def getDevice(self) -> int:
        _initialize()
        return _stage["device"]

    def getDeviceCount(self) -> int:
        _initialize()
        return DEVICES

    def setDevice(self, device: int) -> None:
        _stage["device"] = device
        _context("setDevice")

    def memGetInfo(self) -> tuple[int, int]:
        _context("memGetInfo")
        return DEVICE_BYTES - _POOL.total, DEVICE_BYTES

    def streamQuery(self, stream: int) -> int:
        _context("streamQuery")
        return 0

    def getErrorName(self, status: int) -> str:
        return f"cudaError{status}"

    def getErrorString(self, status: int) -> str:
        return "error"


class Stream:
    """A stream: made on the device, so it needs the context."""

    def __init__(self, non_blocking: bool = False) -> None:
        _context("Stream")
        self.ptr = 0x7F00 if non_blocking else 0

    def use(self) -> Stream:
        _CURRENT[:] = [self]
        return self


class _Cuda:
    driver = _Driver()
    runtime = _Runtime()
    Stream = Stream

    @staticmethod
    def get_current_stream() -> Stream:
        return _CURRENT[0] if _CURRENT else Stream()


class MemoryPool:
    """CuPy's default pool: bookkeeping on the host, allocations on the device."""

    def __init__(self) -> None:
        self.used = self.total = self.limit = 0

    def _device_pool(self) -> MemoryPool:
        _Runtime().getDevice()  # which device is current: no context needed
        return self

    def set_limit(self, size: int | None = None, fraction: float | None = None) -> None:
        pool = self._device_pool()
        if fraction is not None:
            size = int(fraction * _Runtime().memGetInfo()[1])
        pool.limit = int(size or 0)

    def get_limit(self) -> int:
        return self._device_pool().limit

    def used_bytes(self) -> int:
        return self._device_pool().used

    def total_bytes(self) -> int:
        return self._device_pool().total

    def free_all_blocks(self) -> None:
        self._device_pool().total = self.used

    def malloc(self, size: int) -> None:
        _context("malloc")
        if self.limit and self.total + size > self.limit:
            raise OutOfMemoryError(size, self.total, self.limit)
        self.total += size


cuda = _Cuda()
_POOL = MemoryPool()
_CURRENT: list[Stream] = []


def get_default_memory_pool() -> MemoryPool:
    """The pool every allocation draws from."""
    return _POOL


def ones(count: int) -> list[float]:
    """`count` float32 ones on the device (given back to the pool at once)."""
    _POOL.malloc(4 * count)
    return [1.0] * min(count, 4)


def stage() -> dict[str, Any]:
    """How far CUDA got in this process (for a test's asserts)."""
    return dict(_stage)
