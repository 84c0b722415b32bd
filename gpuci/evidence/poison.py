"""The child side's poisoning (GPUCI_POISON=1): every device allocation handed to a test is
filled first, so a kernel that reads memory it never wrote fails the same way every time.

CuPy gets an allocator that fills each block with 0xFF bytes; PyTorch fills uninitialized
memory (NaN, the largest integer) in its deterministic mode. Neither is ever imported
here: `Poisoner` poisons what the suite has imported, at collection and before every
test's setup and call, and journals what it poisoned (`gpuci.pytest_plugin` registers it).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

import pytest

MESSAGE_LIMIT = 500  # as the journal's messages
POISON_BYTE = 0xFF
# Poisoning turns on torch's deterministic mode (warn_only), which warns about every op
# without a deterministic kernel and about cuBLAS; in a suite that errors on warnings those
# would read as failures caused by poison, i.e. as reads of uninitialized memory.
POISON_WARNING_FILTERS = (
    "ignore:.*does not have a deterministic implementation:UserWarning",
    "ignore:Deterministic behavior was enabled:UserWarning",
)


class PoisonedAllocator:
    """A CuPy allocator that fills every block it hands out with 0xFF bytes first."""

    def __init__(self, cupy: Any, allocate: Callable[[int], Any]) -> None:
        self._cuda = cupy.cuda
        self._allocate = allocate

    def __call__(self, size: int) -> Any:
        """Allocate with the wrapped allocator, then fill on the current stream."""
        memptr = self._allocate(size)
        if size > 0:
            # the allocating thread's current stream: the fill is ordered before any use on it
            stream = self._cuda.get_current_stream().ptr
            self._cuda.runtime.memsetAsync(memptr.ptr, POISON_BYTE, size, stream)
        return memptr


def poison_cupy(cupy: Any) -> bool:
    """Wrap CuPy's current allocator in a PoisonedAllocator; False if it already is one."""
    current = cupy.cuda.get_allocator()  # the default pool's malloc unless the suite chose
    if isinstance(current, PoisonedAllocator):
        return False
    cupy.cuda.set_allocator(PoisonedAllocator(cupy, current))
    return True


def poison_torch(torch: Any) -> bool:
    """Make torch fill uninitialized memory (NaN, max int); False if it already does."""
    deterministic: Any = importlib.import_module("torch.utils.deterministic")
    changed = False
    if not torch.are_deterministic_algorithms_enabled():
        # the fill only happens in deterministic mode; warn_only keeps ops that have no
        # deterministic kernel running instead of raising (a suite's own strict mode stays)
        torch.use_deterministic_algorithms(True, warn_only=True)
        changed = True
    if not deterministic.fill_uninitialized_memory:
        deterministic.fill_uninitialized_memory = True
        changed = True
    return changed


POISONERS: dict[str, Callable[[Any], bool]] = {"cupy": poison_cupy, "torch": poison_torch}


class Poisoner:
    """Poisons the GPU libraries already imported, at collection and before every test."""

    def __init__(self, write: Callable[[dict[str, Any]], None] | None) -> None:
        self._write = write  # the journal's, where there is one
        self._poisoned: set[str] = set()
        self._errors: dict[str, str] = {}

    def poison(self) -> None:
        """Poison each library in sys.modules that is not poisoned now; journal what changed."""
        libs: list[str] = []
        errors: dict[str, str] = {}
        for name, poison in POISONERS.items():
            module = sys.modules.get(name)
            if module is None:  # importing it here would cost seconds; a later hook retries
                continue
            try:
                changed = poison(module)
            except Exception as exc:  # a failure here must not fail the test it precedes
                message = f"{type(exc).__name__}: {exc}"[:MESSAGE_LIMIT]
                if self._errors.get(name) != message:
                    errors[name] = self._errors[name] = message
                continue
            self._errors.pop(name, None)
            if changed or name not in self._poisoned:
                self._poisoned.add(name)
                libs.append(name)
        if (libs or errors) and self._write is not None:
            self._write({"e": "poison", "libs": libs, **({"errors": errors} if errors else {})})

    @pytest.hookimpl(trylast=True)  # after the journal's "collected"
    def pytest_collection_finish(self) -> None:
        """Poison what the test modules and conftests imported."""
        self.poison()

    @pytest.hookimpl(tryfirst=True)  # before the test's fixtures allocate
    def pytest_runtest_setup(self) -> None:
        """Poison what an earlier test imported lazily, or re-poison what it undid."""
        self.poison()

    @pytest.hookimpl(tryfirst=True)  # after the fixtures, which may have imported one
    def pytest_runtest_call(self) -> None:
        """Poison what this test's fixtures imported."""
        self.poison()
