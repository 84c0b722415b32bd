"""Tests of gpuci/formats.py and gpuci/evidence_file.py: the evidence engine's fields survive
verdict.json and evidence.json unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuci.evidence_file import evidence_to_json, read_evidence
from gpuci.formats import (
    mode_run_to_json,
    read_mode_run,
    read_verdict,
    verdict_to_json,
    write_json_atomic,
)
from gpuci.model import Category, Evidence, InputError, Outcome, Probe, TestEvidence
from gpuci.steps import Steps

RUN = Path(__file__).parent / "data" / "ci" / "out" / "gpu" / "parallel" / "run.json"
VERDICT_ROOTS = Path(__file__).parent / "data" / "report" / "verdict_roots.json"
SANITIZER = "Invalid __global__ write of size 4 bytes\n    at k+0x70 in k.cu:8\n"


def test_a_verdict_with_roots_round_trips(tmp_path: Path) -> None:
    data = json.loads(VERDICT_ROOTS.read_text(encoding="utf-8"))
    verdict = read_verdict(VERDICT_ROOTS)
    assert verdict_to_json(verdict) == data
    write_json_atomic(tmp_path / "verdict.json", verdict_to_json(verdict))
    again = read_verdict(tmp_path / "verdict.json")
    assert again == verdict
    # The fields are all there to lose: roots, culprits, probes, poisoning, sanitizer.
    assert len(again.roots) == 6
    assert {r.category for r in again.roots} == {
        Category.ORDER_DEPENDENT,
        Category.DEPENDS_ON_OTHERS,
        Category.CONCURRENCY,
    }
    by_id = {t.id: t for t in again.tests}
    victim = by_id["tests/gpu/test_oob.py::test_after_oob"]
    assert victim.culprits == ("tests/gpu/test_oob.py::test_scatter_oob",)
    assert victim.search == "bisection: 6 run(s)"
    assert victim.probes[0] == Probe(count=11, shown=victim.probes[0].shown, outcome=Outcome.FAILED)
    assert len(victim.probes[0].shown) == 8 and victim.poisoned == "passed"
    assert by_id["tests/gpu/test_pool.py::test_reads_pool"].diagnosis.startswith("reads uninit")
    assert by_id["tests/gpu/test_oob.py::test_scatter_oob"].sanitizer.count("\n") == 5


def test_evidence_with_a_culprit_search_round_trips(tmp_path: Path) -> None:
    evidence = Evidence(
        gpu="0",
        budget_s=120.0,
        spent_s=12.5,
        runs=7,
        phases={"alone": {"runs": 2.0, "seconds": 3.5}},
        concurrency={"slots": 3, "most_at_once": 3, "beside": 2, "losers": 1, "killed": 1},
        tests=(
            TestEvidence(
                id="a.py::victim",
                alone=(Outcome.PASSED, Outcome.PASSED),
                culprits=("a.py::culprit",),
                search="bisection: 2 run(s)",
                probes=(
                    Probe(count=3, shown=("a.py::x", "a.py::culprit"), outcome=Outcome.FAILED),
                    Probe(count=1, shown=("a.py::culprit",), outcome=Outcome.FAILED),
                ),
                steps=Steps(n=3, bound=5, runs=2, waves=2, ahead=1, losers=1, killed=1),
                poisoned=Outcome.FAILED,
            ),
            TestEvidence(id="a.py::culprit", alone=(Outcome.CRASHED,), sanitizer=SANITIZER),
            TestEvidence(id="b.py::cut", cut="not rerun: budget", search="not searched (budget)"),
            TestEvidence(
                id="b.py::v2", culprits=("a.py::culprit",), group=("b.py::v1", "b.py::v2")
            ),
            # a hog's pair runs shared its view (it ran the device out of memory)
            TestEvidence(
                id="c.py::hog", culprits=("d.py",), search="pair: 2 run(s)", pair_gpu="1,0"
            ),
        ),
    )
    path = tmp_path / "evidence.json"
    write_json_atomic(path, evidence_to_json(evidence))
    assert read_evidence(path) == evidence
    # written only where set, like `gpu`
    assert ["pair_gpu" in t for t in evidence_to_json(evidence)["tests"]] == [False] * 4 + [True]


def test_a_probe_with_an_unknown_outcome_is_malformed(tmp_path: Path) -> None:
    data = json.loads(VERDICT_ROOTS.read_text(encoding="utf-8"))
    data["tests"][1]["probes"][0]["outcome"] = "exploded"
    write_json_atomic(tmp_path / "verdict.json", data)
    with pytest.raises(InputError, match=r"malformed verdict\.json"):
        read_verdict(tmp_path / "verdict.json")


def test_a_written_file_is_the_same_json_a_line_per_test(tmp_path: Path) -> None:
    data = json.loads(RUN.read_text(encoding="utf-8"))
    data["tests"][0]["message"] = 'a "quoted" <line>\nand ünïcode, ] }'
    write_json_atomic(tmp_path / "run.json", data)
    text = (tmp_path / "run.json").read_text(encoding="utf-8")
    assert json.loads(text) == data
    # each test on its line of its own: a diff of two runs shows the tests that changed
    assert sum(line.startswith('  {"id": ') for line in text.splitlines()) == len(data["tests"])
    for empty in ({}, [], {"tests": []}, {"a": {"b": [1, 2]}}):
        write_json_atomic(tmp_path / "x.json", empty)
        assert json.loads((tmp_path / "x.json").read_text(encoding="utf-8")) == empty


def test_a_run_read_again_is_read_anew_once_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_json_atomic(path, json.loads(RUN.read_text(encoding="utf-8")))
    first = read_mode_run(path)
    assert read_mode_run(path) is first  # parsed once while the file stays the same
    changed = mode_run_to_json(first) | {"wall_s": first.wall_s + 1.0}
    write_json_atomic(path, changed)
    assert read_mode_run(path).wall_s == first.wall_s + 1.0
    path.write_text("{", encoding="utf-8")
    with pytest.raises(InputError, match="not readable as JSON"):
        read_mode_run(path)
