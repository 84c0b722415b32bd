"""Issue 28's generated suite: 30 files of 12 tests of 10 ms, a polluter and a provider far
before their victims, and a storm of identical setup errors (4 per file without a plant).

    python benchmarks/plant_storm.py DIR   (then, in DIR: gpuci check .)

Planted: `test_m04.py::test_sets_pool_limit` leaks a pool limit that
`test_m25.py::test_allocates` checks (order-dependent); `test_m07.py::test_registers`
fills a registry `test_m28.py::test_uses_registered` needs (depends-on-others); the
`device` fixture of `conftest.py` fails every test that asks for it the same way (104).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

FILES, TESTS, STORMED = 30, 12, 4  # STORMED: the first tests of a file ask for `device`
PLANTS = {
    4: "def test_sets_pool_limit():\n    _state.POOL_LIMIT = 1  # never restored\n",
    25: "def test_allocates():\n    assert _state.POOL_LIMIT is None, 'limit leaked'\n",
    7: "def test_registers():\n    _state.REGISTRY['scale'] = 2\n",
    28: "def test_uses_registered():\n    assert _state.REGISTRY.get('scale') == 2\n",
}
CONFTEST = """
    import pytest


    @pytest.fixture
    def device():
        raise RuntimeError("no device handle: CUDA_ERROR_NOT_INITIALIZED")
"""


def write_suite(root: Path) -> None:
    """The suite's files under `root`, which must not exist yet."""
    root.mkdir(parents=True)
    (root / "_state.py").write_text("POOL_LIMIT = None\nREGISTRY = {}\n", encoding="utf-8")
    (root / "conftest.py").write_text(textwrap.dedent(CONFTEST), encoding="utf-8")
    for n in range(FILES):
        lines = ["import time", "import _state", ""]
        for t in range(TESTS):
            uses = "device" if t < STORMED and n not in PLANTS else ""
            lines.append(f"def test_{t}({uses}):\n    time.sleep(0.01)\n")
        lines.append(PLANTS.get(n, ""))
        (root / f"test_m{n:02d}.py").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) != 2 or Path(sys.argv[1]).exists():
        sys.exit("usage: python benchmarks/plant_storm.py DIR (a folder that does not exist)")
    write_suite(Path(sys.argv[1]))
    print(f"planted in {sys.argv[1]}: {FILES} files, 2 culprits, {STORMED * (FILES - 4)} errors")
