"""thread-unsafe: squared_norms() stages its input in one module-level CuPy workspace,
shared by every caller. One thread at a time, each call reads back what it wrote, so the
test passes alone, in its file, in one interpreter and beside other interpreters. Run in
several threads at once (pytest-run-parallel, --parallel-threads=4), every thread
writes its own random input into the same buffer, waits, and reads back whichever input
was written last: all but one thread compare the wrong squares with NumPy's.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

cp = pytest.importorskip("cupy", reason="CuPy is not installed")

pytestmark = pytest.mark.gpu

N = 1 << 16
# Between writing the workspace and reading it back. Threads start within a millisecond
# of each other, so 20 ms makes their windows overlap every time.
RACE_WINDOW_S = 0.02
_WORKSPACE: list[Any] = []  # the one buffer, allocated on first use (no GPU at import)
_ALLOCATING = threading.Lock()


def _workspace() -> Any:
    """The one workspace of the process. The lock only makes sure there is exactly one:
    threads that each allocated their own on a racy first call would hide the bug."""
    with _ALLOCATING:
        if not _WORKSPACE:
            _WORKSPACE.append(cp.empty(N, dtype=cp.float32))
        return _WORKSPACE[0]


def squared_norms(x: np.ndarray) -> np.ndarray:
    """x * x, computed on the GPU through the shared workspace (the planted bug)."""
    workspace = _workspace()  # BUG: one buffer for every thread; should be cp.asarray(x)
    workspace.set(x)
    cp.cuda.runtime.deviceSynchronize()
    time.sleep(RACE_WINDOW_S)  # another thread's set() lands here
    return cp.asnumpy(workspace * workspace)


def _own_input() -> np.ndarray:
    # a different input per thread, or a race would write identical data and hide
    return np.random.default_rng(threading.get_ident()).standard_normal(N, dtype=np.float32)


def test_squared_norms_shared_workspace() -> None:
    x = _own_input()
    np.testing.assert_allclose(squared_norms(x), x * x, rtol=1e-6)


def test_squared_norms_own_buffer() -> None:
    x = _own_input()
    y = cp.asarray(x)  # each call (and each thread) has its own device buffer
    np.testing.assert_allclose(cp.asnumpy(y * y), x * x, rtol=1e-6)
