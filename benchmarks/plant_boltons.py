"""Three isolation bugs planted in boltons' own tests, as a user's real mistakes look.

- a polluter: a test sets the decimal context's precision and never restores it
  (test_mathutils.py); a later file's test divides Decimals (test_statsutils.py):
  order-dependent, its culprit the polluter.
- a provider: a test registers a MIME type for its own use (test_fileutils.py); a later
  file's test relies on it without registering it (test_urlutils.py): depends-on-others.
- a contention: the two largest files (test_urlutils.py, test_ioutils.py, which a first
  check starts together) share a hard-coded scratch file; each writes its name there for
  its whole run and checks it at the end: concurrency, the one naming the other.

    python benchmarks/plant_boltons.py BOLTONS_SDIST_DIR   (then: gpuci check tests)
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchlib import append_plants

PLANTS = {
    "test_mathutils.py": """

def test_plant_rounds_to_money():
    import decimal
    decimal.getcontext().prec = 4  # for this test's money maths; never restored
    assert decimal.Decimal("10.125") * 1 == decimal.Decimal("10.12")
""",
    "test_statsutils.py": """

def test_plant_third_of_a_decimal():
    from decimal import Decimal
    assert Decimal(1) / Decimal(3) == Decimal("0.3333333333333333333333333333")
""",
    "test_fileutils.py": """

def test_plant_registers_bolt_type():
    import mimetypes
    mimetypes.add_type("application/x-bolton", ".bolt")
    assert mimetypes.guess_type("a.bolt")[0] == "application/x-bolton"
""",
    "test_urlutils.py": """

def test_plant_guesses_bolt_type():
    import mimetypes
    assert mimetypes.guess_type("https://example.com/a.bolt")[0] == "application/x-bolton"
""",
}
SCRATCH = """

import pathlib as _pathlib
import tempfile as _tempfile
import time as _time

import pytest as _pytest

_SCRATCH = _pathlib.Path(_tempfile.gettempdir()) / "boltons-scratch.txt"


@_pytest.fixture(scope="module", autouse=True)
def _scratch_owner():
    _SCRATCH.write_text(__name__)  # a hard-coded path: every test file shares it
    yield


def test_plant_scratch_is_ours():
    _time.sleep(0.5)
    assert _SCRATCH.read_text() == __name__, f"{_SCRATCH} was taken over"
"""


def plant(root: Path) -> list[str]:
    """Append the planted tests to `root`/tests; the files changed."""
    tests = root / "tests"
    if not (tests / "test_urlutils.py").is_file():
        raise SystemExit(f"{root}: not a boltons source tree (no tests/test_urlutils.py)")
    # the two largest files share the scratch file besides their own plants
    sharing = ("test_urlutils.py", "test_ioutils.py")
    plants = {n: PLANTS.get(n, "") + (SCRATCH if n in sharing else "") for n in {*PLANTS, *sharing}}
    return append_plants(tests, plants)


if __name__ == "__main__":
    print("planted in:", ", ".join(plant(Path(sys.argv[1]))) or "nothing (planted already)")
