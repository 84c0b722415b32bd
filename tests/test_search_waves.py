"""End-to-end: `gpuci check` finds a polluter among 16 tests in ceil(log2 16) levels, in
waves of speculated runs, and says so in evidence.json: its runs against its bound, its
waves, the runs started ahead, the losers killed and never counted.

The suite, built in tmp_path: a conftest.py that works at import (an expensive interpreter,
as PyTorch's common_utils is: its cost is real work, no assert depends on it), four files
of four tests, then a victim that fails after test_b.py::test_b1 left a flag behind. In the
evidence runs only (GPUCI_MODE=evidence), test_c.py::test_c0 blocks until its interpreter
is killed, and the polluter waits until test_c0 has started: the first wave's runs are the
first half (the polluter's: it shows), its first quarter, and test_c.py's quarter, a loser
that is still running when the wave knows, whatever the machine's load.

A second suite costs 5 s per interpreter at import, and its own start: an expensive
start-up (>= 5 s, as the screens measure it, whatever the load): its last candidates'
confirmations start ahead, held after collection, and only the culprit's runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from cli_runner import clean_env, gpuci, write_files

POLLUTER = "test_b.py::test_b1"
BLOCKER = "test_c.py::test_c0"
VICTIM = "test_e.py::test_e_reads_fresh_state"
FOUR = "\n".join(f"def test_{{f}}{i}():\n    pass\n\n" for i in range(4))
FILES = {
    "pytest.ini": "[pytest]\n",
    "state.py": "POLLUTED = False\n",
    "conftest.py": """
        # an expensive interpreter: work done at import by every one of them
        WARMED = sum(i * i for i in range(2_000_000))
    """,
    "test_a.py": FOUR.format(f="a"),
    "test_b.py": """
        import os, pathlib, time

        import state

        STARTED = pathlib.Path(os.environ["BLOCKER_STARTED"])


        def test_b0():
            pass


        def test_b1():
            if os.environ.get("GPUCI_MODE") == "evidence":
                # answer only once the loser beside it runs (a bug fails the test, no hang)
                deadline = time.monotonic() + 60
                while not STARTED.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            state.POLLUTED = True  # never restored


        def test_b2():
            pass


        def test_b3():
            pass
    """,
    "test_c.py": """
        import os, pathlib, time


        def test_c0():
            if os.environ.get("GPUCI_MODE") == "evidence":
                pathlib.Path(os.environ["BLOCKER_STARTED"]).touch()
                time.sleep(120)  # until its interpreter is killed


        def test_c1():
            pass


        def test_c2():
            pass


        def test_c3():
            pass
    """,
    "test_d.py": FOUR.format(f="d"),
    "test_e.py": """
        import state


        def test_e_reads_fresh_state():
            assert not state.POLLUTED, "a flag left behind"
    """,
}


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[Any]]:
    """One check of the suite: its evidence.json and its runs.jsonl lines."""
    root = tmp_path_factory.mktemp("waves")
    suite = write_files(root / "suite", FILES)
    out = root / "out"
    env = {"BLOCKER_STARTED": str(root / "blocker-started")}
    args = ("check", ".", "--out", str(out), "--workers", "3", "--evidence-budget", "600")
    proc = gpuci(*args, cwd=suite, env={**clean_env(), **env})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    evidence = json.loads((out / "evidence" / "evidence.json").read_text(encoding="utf-8"))
    lines = (out / "evidence" / "runs.jsonl").read_text(encoding="utf-8").splitlines()
    return evidence, [json.loads(line) for line in lines]


def _victim(evidence: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in evidence["tests"] if t["id"] == VICTIM)


@pytest.mark.slow
def test_the_polluter_is_found_within_the_bound_in_fewer_waves(
    checked: tuple[dict[str, Any], list[Any]],
) -> None:
    evidence, _ = checked
    victim = _victim(evidence)
    assert victim["culprits"] == [POLLUTER], victim
    steps = victim["steps"]
    assert steps["n"] == 16 and steps["bound"] == math.ceil(math.log2(16)) + 3
    assert steps["runs"] <= steps["bound"] and steps["tries"] == 0
    assert steps["runs"] == len(victim["probes"])  # what it counted is what it kept
    # levels decided together: three slots, a wave of three runs decides two levels
    assert steps["waves"] < steps["runs"] and steps["ahead"] >= 1


@pytest.mark.slow
def test_a_speculated_loser_is_killed_and_never_counts(
    checked: tuple[dict[str, Any], list[Any]],
) -> None:
    evidence, timeline = checked
    steps = _victim(evidence)["steps"]
    assert steps["killed"] >= 1 and steps["losers"] >= steps["killed"]
    assert evidence["concurrency"]["killed"] >= 1
    # the blocker's run is on the timeline, marked lost (other losers may be, where they
    # still ran when their wave knew); no run count holds them
    killed = [r for r in timeline if r.get("lost") == "killed"]
    assert any("after 4 test(s)" in r["label"] for r in killed), killed
    counted = [r for r in timeline if "lost" not in r]
    assert evidence["runs"] == len(counted)
    assert evidence["phases"]["culprits"]["runs"] == sum(
        1 for r in counted if r["phase"] == "culprits"
    )
    # no run the search kept held the blocker (it runs only in the loser)
    assert all(BLOCKER not in probe["shown"] for probe in _victim(evidence)["probes"])


EXPENSIVE = {  # every interpreter costs 5 s at import, and its own start: expensive (>= 5 s)
    "pytest.ini": "[pytest]\n",
    "state.py": "POLLUTED = False\n",
    "conftest.py": "import time\n\ntime.sleep(5)  # the cost only: no assert depends on it\n",
    "test_a.py": "import state\n\n\n"
    + "".join(f"def test_a{i}():\n    pass\n\n\n" for i in (0, 1))
    + "def test_a2():\n    state.POLLUTED = True\n\n\ndef test_a3():\n    pass\n",
    "test_c.py": "import state\n\n\ndef test_victim():\n    assert not state.POLLUTED\n",
}


@pytest.mark.slow
def test_an_expensive_interpreter_starts_the_confirmations_ahead(tmp_path: Path) -> None:
    suite = write_files(tmp_path / "suite", EXPENSIVE)
    out = tmp_path / "out"
    args = ("check", ".", "--out", str(out), "--workers", "2", "--evidence-budget", "600")
    proc = gpuci(*args, cwd=suite, env=clean_env())
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    evidence = json.loads((out / "evidence" / "evidence.json").read_text(encoding="utf-8"))
    victim = next(t for t in evidence["tests"] if t["id"] == "test_c.py::test_victim")
    assert victim["culprits"] == ["test_a.py::test_a2"]
    steps = victim["steps"]
    assert steps["runs"] <= steps["bound"] and steps["killed"] >= 1
    # the last candidates' confirmations were started ahead, held after collection: the
    # culprit's ran the strict confirmation, the others were killed before any test ran
    # (the victim's own runs started ahead hold test_c.py alone: not confirmations)
    journals = sorted((out / "evidence" / "journal").glob("test_c.py.held-*.jsonl"))
    read = [[json.loads(line) for line in j.read_text().splitlines()] for j in journals]
    # the ids each interpreter held after its collection (the ledger's import events first)
    held_ids = [next((str(x.get("ids")) for x in e if x["e"] == "held"), "") for e in read]
    events = [e for e, ids in zip(read, held_ids, strict=True) if "test_a.py" in ids]
    ran = [e for e in events if any(x.get("id") == "test_c.py::test_victim" for x in e)]
    assert len(events) >= 2 and len(ran) == 1, events
    finished = [x for x in ran[0] if x["e"] == "finish"]
    assert [(x["id"], x["outcome"]) for x in finished] == [
        ("test_a.py::test_a2", "passed"),
        ("test_c.py::test_victim", "failed"),
    ]
    timeline = (out / "evidence" / "runs.jsonl").read_text(encoding="utf-8").splitlines()
    held = [json.loads(r) for r in timeline if "held for" in r]
    assert len(held) == len(events) - 1 and all(r["lost"] == "killed" for r in held)
