"""A planted crash: cudaMemcpy from a host pointer that is not memory segfaults the process.

The tests before and after it are plain: gpuci must report the crash against
`test_copy_from_bad_host_pointer` and still run `test_after_crash` in a fresh interpreter.
"""

from __future__ import annotations


def test_before_crash() -> None:
    import cupy as cp

    assert int(cp.ones(10, dtype=cp.int32).sum()) == 10


def test_copy_from_bad_host_pointer() -> None:
    import cupy as cp

    device = cp.empty(1 << 20, dtype=cp.uint8)
    # Host address 0x10 is unmapped: the driver reads it on the CPU and the interpreter
    # dies with SIGSEGV, as with a dangling host buffer in a real extension.
    cp.cuda.runtime.memcpy(device.data.ptr, 0x10, device.nbytes, cp.cuda.runtime.memcpyHostToDevice)


def test_after_crash() -> None:
    import cupy as cp

    assert float(cp.linspace(0, 1, 11)[-1]) == 1.0
