"""A stand-in for a GPU library's process-wide memory pool, so that this example runs on
any runner: a limit set once stays for every later test in the process, as CuPy's
`get_default_memory_pool().set_limit()` does."""

from __future__ import annotations

POOL: dict[str, int | None] = {"limit": None}


def allocate(nbytes: int) -> bytearray:
    """A buffer of `nbytes`, or MemoryError above the pool's limit."""
    limit = POOL["limit"]
    if limit is not None and nbytes > limit:
        raise MemoryError(f"out of memory allocating {nbytes} bytes (pool limit {limit})")
    return bytearray(nbytes)
