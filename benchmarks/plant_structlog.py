"""Three isolation bugs planted in structlog's own tests, beside its true one (ten tests of
`processors/test_processors.py` pass only where pytest imported `test_utils.py`, which
imports `multiprocessing`: structlog names the process only where that module is loaded).

- a polluter: a test turns off `logging.raiseExceptions` and never restores it
  (test_config.py); a test of a file eight files later relies on it (test_tracebacks.py):
  order-dependent, its culprit among some 800 earlier tests, none of its words a hint.
- a provider: a test names a custom level (test_dev.py); a later file's test relies on
  the name without setting it (test_testing.py): depends-on-others, by a test, not an
  import, its message quoting nothing a source writes.
- a contention: the two largest files (processors/test_processors.py, test_stdlib.py,
  which a first check starts together) share a hard-coded scratch file, each taking it for
  its whole run: where both run at once the second fails; one after the other, plain
  pytest's, both pass. A pair run holds both sides at their first tests, but the victim's
  side runs its one test and lets go at once, so whether the two holds meet is timing:
  `concurrency` naming the other file where the pair showed it twice (one side or the
  other failing), `flaky` where the same pair run went both ways (DESIGN's rule).

    python benchmarks/plant_structlog.py STRUCTLOG_SDIST_DIR   (then: gpuci check tests)
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchlib import append_plants

PLANTS = {
    "test_config.py": """

def test_plant_quiet_handler_errors():
    import logging
    logging.raiseExceptions = False  # to keep a broken handler quiet; never restored
    assert not logging.raiseExceptions
""",
    "test_tracebacks.py": """

def test_plant_handler_errors_are_raised():
    import logging
    assert logging.raiseExceptions
""",
    "test_dev.py": """

def test_plant_names_notice_level():
    import logging
    logging.addLevelName(25, "NOTICE")  # for this test's output; never removed
    assert logging.getLevelName(25) == "NOTICE"
""",
    "test_testing.py": """

def test_plant_level_25_has_a_name():
    import logging
    assert logging.getLevelName(25) != "Level 25"
""",
}
SCRATCH = """

import fcntl as _fcntl
import pathlib as _pathlib
import tempfile as _tempfile

import pytest as _pytest

_LOCK = _pathlib.Path(_tempfile.gettempdir()) / "structlog-scratch.lock"


@_pytest.fixture(scope="module", autouse=True)
def _scratch_owner():
    # a hard-coded scratch file every test file shares, taken for the whole file
    with _LOCK.open("a") as handle:
        try:
            _fcntl.flock(handle, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield True


def test_plant_scratch_is_ours(_scratch_owner):
    assert _scratch_owner, f"another interpreter holds {_LOCK}"
"""


def plant(root: Path) -> list[str]:
    """Append the planted tests to `root`/tests; the files changed."""
    tests = root / "tests"
    if not (tests / "test_utils.py").is_file():
        raise SystemExit(f"{root}: not a structlog source tree (no tests/test_utils.py)")
    sharing = ("processors/test_processors.py", "test_stdlib.py")
    plants = {n: PLANTS.get(n, "") + (SCRATCH if n in sharing else "") for n in {*PLANTS, *sharing}}
    return append_plants(tests, plants)


if __name__ == "__main__":
    print("planted in:", ", ".join(plant(Path(sys.argv[1]))) or "nothing (planted already)")
