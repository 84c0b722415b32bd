"""gpuci: catch GPU test-isolation regressions in CI."""

from __future__ import annotations

__version__ = "0.1.0"
