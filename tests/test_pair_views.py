"""Pair runs on several GPUs: which view each side sees, and the command that says so.

gpu_polluted's two memory hogs on 2 H100s (issue 40): the parallel screen ran hog_a with
`CUDA_VISIBLE_DEVICES=0,1` and hog_b with `1,0`. Replayed with their own views, the sides of
every pair run started on different devices, never met, and the search ended "not
reproduced". A victim that ran the device out of memory has every side of its pair runs see
its view; any other keeps each side's own, and the printed command runs what ran.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import gpuci.evidence.kinds.pairs
from gpuci.evidence.admission import Admission
from gpuci.evidence.classify import Classified
from gpuci.evidence.context import Context
from gpuci.evidence.orders import interpreter_order
from gpuci.evidence.pairs import search_pairs
from gpuci.evidence.probe import ProbeRun
from gpuci.evidence.reproduce import culprit_command, finding_commands
from gpuci.evidence.requests import Request
from gpuci.evidence.results import ModeResults
from gpuci.evidence.victims import Task
from gpuci.evidence_file import evidence_to_json, read_evidence
from gpuci.formats import write_json_atomic
from gpuci.model import (
    Category,
    Evidence,
    FileRun,
    FileStatus,
    Mode,
    ModeRun,
    Outcome,
    TestResult,
)
from gpuci.run.proc.discover import file_of
from gpuci.state.left import Ledger

HOG_A, HOG_B = "test_hog_a.py::test_hold", "test_hog_b.py::test_hold"
VIEWS = {"test_hog_a.py": "0,1", "test_hog_b.py": "1,0"}  # the parallel screen's slots
OOM = "OutOfMemoryError: out of device memory allocating 52 GiB"
OOM_KIND = "OutOfMemoryError: out of device memory allocating N GiB"
DISK = "FileExistsError: /tmp/shared-cache.lock"  # contention that no GPU view changes


def parallel_screen(message: str) -> ModeResults:
    """Both hogs failed with `message` in the parallel screen, each in its own slot's view."""
    tests = tuple(
        TestResult(id=i, file=file_of(i), outcome=Outcome.FAILED, message=message)
        for i in (HOG_A, HOG_B)
    )
    files = tuple(
        FileRun(file=f, status=FileStatus.FAILED, slot=n + 1, gpu=v, start=0.0, end=5.0)
        for n, (f, v) in enumerate(VIEWS.items())
    )
    run = ModeRun(
        mode=Mode.PARALLEL,
        command=("gpuci",),
        rootdir="/x",
        workers=2,
        gpus=("0", "1"),
        tests=tests,
        files=files,
    )
    return ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)


@dataclass
class TwoGpus:
    """Pair runs on 2 GPUs of 80 GiB: two 52 GiB hogs fail (both) only where they start on
    one device; a `disk` contention fails them wherever they run."""

    disk: bool = False
    launched: list[list[str | None]] = field(default_factory=list)  # each run's sides' views
    admission: Admission = field(default_factory=lambda: Admission(slots=4))
    prepared: list[list[str | None]] = field(default_factory=list)  # each offer's sides' views

    def start_ahead(self, requests: Iterable[Request]) -> None:
        self.prepared.append([r.side_gpu for r in requests if r.side])

    def exhausted(self) -> bool:
        return False

    def stopping(self) -> bool:
        return False

    def run_together(
        self, groups: Sequence[tuple[Sequence[str], str | None]], *, phase: str, label: str
    ) -> tuple[list[ProbeRun], int]:
        views = [gpu for _, gpu in groups]
        self.launched.append(views)
        met = len({(v or "").split(",")[0] for v in views}) == 1
        fails = self.disk or met
        outcome = Outcome.FAILED if fails else Outcome.PASSED
        message = "" if not fails else DISK if self.disk else OOM
        runs = [
            ProbeRun(
                outcomes=dict.fromkeys(ids, outcome),
                log=Path("/nonexistent"),
                log_from=0,
                results={
                    i: TestResult(id=i, file=file_of(i), outcome=outcome, message=message)
                    for i in ids
                },
            )
            for ids, _ in groups
        ]
        return runs, len(groups)


def test_an_out_of_memory_victims_pair_runs_every_side_on_its_view() -> None:
    prober = TwoGpus()
    found = search_pairs(
        prober,  # type: ignore[arg-type]
        parallel_screen(OOM),
        victim=HOG_A,
        candidates=("test_hog_b.py",),
        kind=OOM_KIND,
        partnerable={HOG_B},
        passed_alone={HOG_B},  # in its own file alone (the isolated screen)
    )
    # every side of every run saw hog_a's view: they met on GPU 0, and the pair showed it
    assert prober.launched and all(views == ["0,1", "0,1"] for views in prober.launched)
    assert found.culprits == ("test_hog_b.py",) and found.partners == (HOG_B,)
    assert found.gpu == "0,1"
    assert found.note.endswith("both sides on GPU 0 first")
    # the printed command runs what ran: both sides with the victim's view
    command = culprit_command(
        HOG_A,
        Category.CONCURRENCY,
        found.culprits,
        {Mode.PARALLEL: parallel_screen(OOM)},
        pair_gpu=found.gpu,
    )
    assert command.count("CUDA_VISIBLE_DEVICES=0,1 ") == 2
    assert "CUDA_VISIBLE_DEVICES=1,0" not in command


def test_any_other_victims_pair_runs_each_side_on_its_own_view() -> None:
    prober = TwoGpus(disk=True)
    found = search_pairs(
        prober,  # type: ignore[arg-type]
        parallel_screen(DISK),
        victim=HOG_A,
        candidates=("test_hog_b.py",),
        kind="FileExistsError: /tmp/shared-cache.lock",
        partnerable={HOG_B},
        passed_alone={HOG_B},  # in its own file alone (the isolated screen)
    )
    assert prober.launched and all(views == ["0,1", "1,0"] for views in prober.launched)
    assert found.culprits == ("test_hog_b.py",) and found.gpu is None
    assert "different GPUs first (0, 1)" in found.note
    command = culprit_command(
        HOG_A,
        Category.CONCURRENCY,
        found.culprits,
        {Mode.PARALLEL: parallel_screen(DISK)},
        pair_gpu=found.gpu,
    )
    hog_a, hog_b = command.removeprefix("cd /x && (").split(" & ")[:2]
    assert hog_a.startswith("CUDA_VISIBLE_DEVICES=0,1 ") and hog_a.endswith(HOG_A)
    assert hog_b.startswith("CUDA_VISIBLE_DEVICES=1,0 ") and hog_b.endswith("test_hog_b.py")


def test_the_partner_and_evidence_json_keep_the_pairs_view(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def hog(victim: str, other: str) -> Task:
        return Task(
            victim=victim,
            category=Category.CONCURRENCY,
            candidates=(file_of(other),),
            rank=(0, 0),
            kind=OOM_KIND,
        )

    parallel = parallel_screen(OOM)
    classified = {
        t.id: Classified(
            id=t.id,
            category=Category.CONCURRENCY,
            outcomes={Mode.PARALLEL: Outcome.FAILED, Mode.ISOLATED: Outcome.PASSED},
            reruns=(Outcome.PASSED,),
            # each passed in its own file alone: a partner's claim needs no run without it
            results={
                Mode.PARALLEL: t,
                Mode.ISOLATED: dataclasses.replace(t, outcome=Outcome.PASSED),
            },
        )
        for t in parallel.run.tests
    }
    monkeypatch.setattr(
        gpuci.evidence.kinds.pairs,
        "plan_searches",
        lambda *_, **__: [hog(HOG_A, HOG_B), hog(HOG_B, HOG_A)],
    )
    results = {Mode.PARALLEL: parallel}
    ctx = Context(
        prober=TwoGpus(),  # type: ignore[arg-type]
        results=results,
        orders={},
        progress=io.StringIO(),
        ledger=Ledger(),
    )
    found = gpuci.evidence.kinds.pairs.search_pairs_of(ctx, classified, {})
    # hog_b is hog_a's partner, shown by hog_a's pair runs: their view is its command's
    assert found[HOG_B].culprits == (HOG_A,)
    assert found[HOG_A].pair_gpu == found[HOG_B].pair_gpu == "0,1"
    # evidence.json keeps it (the diff prints the commands from there)
    path = tmp_path / "evidence.json"
    evidence = Evidence(gpu="0,1", budget_s=None, tests=(found[HOG_A], found[HOG_B]))
    write_json_atomic(path, evidence_to_json(evidence))
    assert read_evidence(path) == evidence
    read = {t.id: t for t in read_evidence(path).tests}

    def reproduce(test_id: str) -> str:
        return finding_commands(
            test_id,
            Category.CONCURRENCY,
            searched=Category.CONCURRENCY,
            evidence=read[test_id],
            outcomes={Mode.PARALLEL: Outcome.FAILED},
            reruns=(Outcome.PASSED,),
            results=results,
            orders={m: interpreter_order(r) for m, r in results.items()},
        ).reproduce

    # contention is symmetric: one command, both sides on hog_a's view
    assert reproduce(HOG_B) == reproduce(HOG_A)
    assert reproduce(HOG_B).count("CUDA_VISIBLE_DEVICES=0,1 ") == 2
    assert "1,0" not in reproduce(HOG_B)
