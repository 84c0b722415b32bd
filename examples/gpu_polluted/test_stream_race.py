"""order-dependent: test_async_pipeline makes a non-blocking stream current and never
restores the default. test_raw_memcpy_roundtrip then launches a slow kernel on the
current stream and copies its output with cudaMemcpy, which runs on the legacy
default stream. That stream waits for blocking streams only, so behind a leaked
non-blocking stream the copy overtakes the kernel and reads stale data. Alone, the
current stream is the legacy default stream and the copy waits.
"""

from __future__ import annotations

import numpy as np
import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed")

pytestmark = pytest.mark.gpu

# Spins ~50 ms (1e8 cycles at ~2 GHz) before writing, so an unordered copy always wins.
SLOW_FILL = cp.RawKernel(
    r"""
extern "C" __global__ void slow_fill(float* out, int n, long long spin_cycles) {
    long long start = clock64();
    while (clock64() - start < spin_cycles) { }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)(i + 1);
}
""",
    "slow_fill",
)
N = 1 << 16  # 256 blocks of 256: one wave, so the kernel takes one spin, not several


def test_async_pipeline() -> None:
    stream = cp.cuda.Stream(non_blocking=True)
    stream.use()  # BUG: should be `with stream:`, which restores the previous stream
    x = cp.arange(N, dtype=cp.float32)
    assert float((x * 2).sum()) == float(N * (N - 1))


def test_raw_memcpy_roundtrip() -> None:
    src = cp.zeros(N, dtype=cp.float32)
    dst = cp.zeros(N, dtype=cp.float32)
    SLOW_FILL((N // 256,), (256,), (src, np.int32(N), np.int64(100_000_000)))
    cp.cuda.runtime.memcpy(dst.data.ptr, src.data.ptr, N * 4, cp.cuda.runtime.memcpyDeviceToDevice)
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(dst.get(), np.arange(1, N + 1, dtype=np.float32))
