"""The default evidence budget covers what it plans: both culprit searches of a long suite
(a polluter and a provider far apart, a storm of identical setup errors) finish at default
settings, and a group's representatives run alone once."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from cli_runner import gpuci

FILES = 16
TESTS = 6
POLLUTER, VICTIM, PROVIDER, NEEDS = 3, 12, 5, 14  # files: the victims far after their causes


def write_suite(root: Path) -> Path:
    root.mkdir()
    (root / "_state.py").write_text("POOL_LIMIT = None\nREGISTRY = {}\n", encoding="utf-8")
    (root / "conftest.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.fixture
            def device():
                raise RuntimeError("no device handle: CUDA_ERROR_NOT_INITIALIZED")
            """
        ),
        encoding="utf-8",
    )
    planted = {
        POLLUTER: "def test_sets_pool_limit():\n    _state.POOL_LIMIT = 1  # never reset\n",
        VICTIM: "def test_allocates():\n    assert _state.POOL_LIMIT is None, 'limit leaked'\n",
        PROVIDER: "def test_registers():\n    _state.REGISTRY['scale'] = 2\n",
        NEEDS: "def test_uses_registered():\n    assert _state.REGISTRY.get('scale') == 2\n",
    }
    for number in range(FILES):
        lines = ["import time", "import _state", ""]
        for test in range(TESTS):
            # the storm: one setup error in each file without a planted test; the others
            # take a little time, as replaying the tests before a victim does
            storm = test == 0 and number not in planted
            lines.append(f"def test_{test}({'device' if storm else ''}):\n    time.sleep(0.02)\n")
        lines.append(planted.get(number, ""))
        (root / f"test_m{number:02d}.py").write_text("\n".join(lines), encoding="utf-8")
    return root


@pytest.mark.slow
def test_the_default_budget_finishes_both_searches(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "suite")
    proc = gpuci("check", ".", "--out", "out", "--workers", "2", cwd=suite)
    assert proc.returncode == 1, proc.stderr[-3000:]
    verdict = json.loads((suite / "out/verdict.json").read_text(encoding="utf-8"))
    tests = {t["id"]: t for t in verdict["tests"]}
    victim = tests[f"test_m{VICTIM:02d}.py::test_allocates"]
    assert victim["category"] == "order-dependent"
    assert victim["culprits"] == [f"test_m{POLLUTER:02d}.py::test_sets_pool_limit"]
    needs = tests[f"test_m{NEEDS:02d}.py::test_uses_registered"]
    assert needs["category"] == "depends-on-others"
    assert needs["providers"] == [f"test_m{PROVIDER:02d}.py::test_registers"]
    assert not [t["id"] for t in verdict["tests"] if t.get("cut")], proc.stderr[-3000:]
    assert "not rerun: budget" not in proc.stderr
    evidence = verdict["evidence"]
    assert evidence["spent_s"] < evidence["budget_s"]
    # the searches' share of the estimate (before its slack) covers what they spent
    planned = re.search(r"evidence budget .*\bculprits (\d+)s", proc.stderr)
    assert planned, proc.stderr[-3000:]
    phases = json.loads((suite / "out/evidence/evidence.json").read_text(encoding="utf-8"))
    assert float(planned[1]) >= phases["phases"]["culprits"]["seconds"], proc.stderr[-3000:]
    # the storm's representatives ran alone once each: never again among the remaining runs
    storm = [t for t in verdict["tests"] if t["id"].endswith("::test_0") and t["outcomes"]]
    reps = [t for t in storm if t["category"] == "failed" and not t.get("inferred_from")]
    assert reps and all(len(t["reruns"]) == 1 for t in reps), [t["reruns"] for t in reps]
