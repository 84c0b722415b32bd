"""The source's hint: the tests before a victim whose source names what its failure quotes,
tried first, then narrowed and confirmed (a wrong one costs a run, a common value none)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci.evidence.context import Context
from gpuci.evidence.requests import Request
from gpuci.evidence.results import ModeResults
from gpuci.evidence.search.hinted import LEDGER, SOURCE, hint_tasks, hinted_first
from gpuci.evidence.search.source_hints import MAX_WRITERS, quoted_values, writers
from gpuci.evidence.victims import Task
from gpuci.model import Category, Mode, ModeRun, Outcome, TestResult
from gpuci.state.left import Ledger
from tests.test_culprit_search import FakeProber

REGISTERS = """\
import pytest


def test_unrelated():
    assert 1 + 1 == 2


class TestSchemas:
    @pytest.mark.parametrize("city", ["Oslo", "Bergen"])
    def test_registers(self, city):
        class PlantAddressSchema:  # defining it registers it by name
            pass


def test_rewords():
    MESSAGES["required"] = "This field is required."
"""


def suite(tmp_path: Path) -> Path:
    (tmp_path / "test_a.py").write_text(REGISTERS)
    common = "\n\n".join(f"def test_dtype_{i}():\n    x = 'float32'\n" for i in range(12))
    (tmp_path / "test_b.py").write_text(common)
    return tmp_path


CANDIDATES = (
    "test_a.py::test_unrelated",
    "test_a.py::TestSchemas::test_registers[Oslo]",
    "test_a.py::TestSchemas::test_registers[Bergen]",
    "test_a.py::test_rewords",
    *(f"test_b.py::test_dtype_{i}" for i in range(12)),
)


def test_quoted_values_are_whole_and_long_enough() -> None:
    message = (
        "AssertionError: assert ['This field is required.'] == ['Missing dat...uired field.']"
        " and 'ab' and \"PlantAddressSchema\" and '   '"
    )
    assert quoted_values(message) == ["This field is required.", "PlantAddressSchema"]


def test_the_tests_whose_source_names_the_quoted_value(tmp_path: Path) -> None:
    root = suite(tmp_path)
    message = "RegistryError: Class with name 'PlantAddressSchema' was not found."
    # every parametrized case of the method that names it, nothing else
    assert writers(CANDIDATES, message, root) == CANDIDATES[1:3]
    reworded = "AssertionError: assert ['This field is required.'] == ['Missing data']"
    assert writers(CANDIDATES, reworded, root) == (CANDIDATES[3],)


def test_a_value_many_tests_write_points_at_none(tmp_path: Path) -> None:
    root = suite(tmp_path)
    assert len(CANDIDATES[4:]) > MAX_WRITERS
    assert writers(CANDIDATES, "TypeError: dtype 'float32' not understood", root) == ()
    # a rarer value beside it still points
    both = "KeyError: 'float32' in 'PlantAddressSchema'"
    assert writers(CANDIDATES, both, root) == CANDIDATES[1:3]


def test_a_missing_or_broken_file_points_at_nothing(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("def test_x(:\n    'PlantAddressSchema'\n")
    ids = ("test_a.py::test_x", "test_gone.py::test_y")
    assert writers(ids, "'PlantAddressSchema' was not found", tmp_path) == ()


def results_with(victim: str, message: str, root: Path) -> dict[Mode, ModeResults]:
    tests = (
        TestResult(
            id=victim,
            file=victim.partition("::")[0],
            outcome=Outcome.FAILED,
            message=message,
        ),
    )
    run = ModeRun(mode=Mode.ISOLATED, command=("gpuci",), rootdir=str(root), workers=1, tests=tests)
    return {Mode.ISOLATED: ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)}


def hinted_task(root: Path, victim: str, message: str, category: Category) -> Task:
    """The victim's search among CANDIDATES, hinted as the culprit search hints it."""
    planned = Task(victim=victim, category=category, candidates=CANDIDATES, rank=(0, 0))
    (hinted,) = hint_tasks(_ctx(None, results_with(victim, message, root)), [planned])
    return hinted


def test_a_provider_the_source_names_is_found_in_two_runs(tmp_path: Path) -> None:
    victim = "test_c.py::test_nests_by_name"
    message = "RegistryError: Class with name 'PlantAddressSchema' was not found."
    hinted = hinted_task(suite(tmp_path), victim, message, Category.DEPENDS_ON_OTHERS)
    assert hinted.hint == SOURCE and hinted.hinted == CANDIDATES[1:3]
    provider = CANDIDATES[2]
    prober = FakeProber(lambda ids, _: Outcome.PASSED if provider in ids else Outcome.FAILED)
    search = hinted_first(prober, hinted)
    assert search is not None and search.culprits == (provider,)
    assert prober.runs[0] == [*CANDIDATES[1:3], victim]  # the hint first
    assert prober.runs[-1] == [provider, victim]  # narrowed and confirmed among the hinted
    assert len(prober.runs) <= 4
    assert search.probes[0].kind == SOURCE
    assert search.note.endswith("the source's hint confirmed")


def test_a_wrong_source_hint_costs_one_run(tmp_path: Path) -> None:
    victim = "test_c.py::test_message"
    message = "AssertionError: assert ['This field is required.'] == ['Missing data']"
    hinted = hinted_task(suite(tmp_path), victim, message, Category.ORDER_DEPENDENT)
    assert hinted.hinted == (CANDIDATES[3],) and hinted.hint == SOURCE
    culprit = CANDIDATES[9]  # not the one the source names
    prober = FakeProber(lambda ids, _: Outcome.FAILED if culprit in ids else Outcome.PASSED)
    search = hinted_first(prober, hinted)
    assert search is not None and search.culprits == (culprit,)
    assert prober.runs[0] == [CANDIDATES[3], victim]
    assert search.note.endswith("(the source's hint did not show it)")


def test_the_ledger_is_read_first_and_concurrency_is_not_hinted(tmp_path: Path) -> None:
    root = suite(tmp_path)
    victim = "test_c.py::test_message"
    message = "FileNotFoundError: 'This field is required.'"
    ledger = Ledger(tests={CANDIDATES[0]: {"cwd": ["/old", "/elsewhere"]}})
    order = Task(
        victim=victim, category=Category.ORDER_DEPENDENT, candidates=CANDIDATES, rank=(0, 0)
    )
    pair = Task(
        victim=victim, category=Category.CONCURRENCY, candidates=("test_a.py",), rank=(0, 0)
    )
    results = results_with(victim, message, root)
    ctx = Context(
        prober=None,  # type: ignore[arg-type]
        results=results,
        orders={},
        progress=io.StringIO(),
        ledger=ledger,
    )
    ordered, paired = hint_tasks(ctx, [order, pair])
    assert ordered.hint == LEDGER and ordered.hinted == (CANDIDATES[0],)
    assert paired.hinted == () and paired.hint == ""


def test_a_provider_hint_runs_before_the_suites_files_collected(tmp_path: Path) -> None:
    from gpuci.evidence.kinds.provider_search.providers import _search
    from gpuci.evidence.search.step import COLLECTED

    root = suite(tmp_path)
    victim = "test_c.py::test_nests_by_name"
    message = "RegistryError: Class with name 'PlantAddressSchema' was not found."
    results = results_with(victim, message, root)
    suite_tests = (
        *(TestResult(id=c, file=c.partition("::")[0], outcome=Outcome.PASSED) for c in CANDIDATES),
        TestResult(id=victim, file="test_c.py", outcome=Outcome.PASSED),
    )
    run = ModeRun(
        mode=Mode.SUITE, command=("gpuci",), rootdir=str(root), workers=1, tests=suite_tests
    )
    results[Mode.SUITE] = ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)
    planned = Task(
        victim=victim, category=Category.DEPENDS_ON_OTHERS, candidates=CANDIDATES, rank=(0, 0)
    )
    (hinted,) = hint_tasks(_ctx(None, results), [planned])
    provider = CANDIDATES[1]
    right = HidingStartUps(lambda ids, _: Outcome.PASSED if provider in ids else Outcome.FAILED)
    search = _search(_ctx(right, results), hinted)
    assert search.culprits == (provider,) and search.probes[0].kind == SOURCE
    assert len(right.runs) <= 3  # no run of the suite's files collected
    # the interpreters started ahead for its runs with the files collected (all of them,
    # then the halving's first wave: one slot, one run) go: the hint answered
    assert right.withdrawn == [["test_a.py", "test_b.py", victim], ["test_a.py", victim]]
    # a wrong hint: then the files collected, as without one (its import is the provider)
    importing = Collecting(lambda ids, _: Outcome.PASSED if "test_b.py" in ids else Outcome.FAILED)
    search = _search(_ctx(importing, results), hinted)
    assert [p.kind for p in search.probes[:2]] == [SOURCE, COLLECTED]
    assert search.culprits == ("test_b.py",)


def _ctx(prober: FakeProber | None, results: dict[Mode, ModeResults]) -> Context:
    return Context(
        prober=prober,  # type: ignore[arg-type]
        results=results,
        orders={},
        progress=io.StringIO(),
        ledger=Ledger(),
    )


class Collecting(FakeProber):
    """Answers by the files a run collects too (`ids` then starts with them)."""

    def run(self, ids: Sequence[str], *, collect: Sequence[str] = (), **rest: Any) -> Any:
        return super().run([*collect, *ids], collect=collect, **rest)


@dataclass
class HidingStartUps(FakeProber):
    """Where start-ups are worth hiding: what it was asked to start ahead, or to give back."""

    hides_start_ups: bool = True
    withdrawn: list[list[str]] = field(default_factory=list)  # each: collected files, then ids

    def prepare(self, ids: Sequence[str], **_: Any) -> None:
        pass

    def start_ahead(self, requests: Sequence[Request]) -> None:
        for request in requests:
            self.prepare(request.ids, copies=request.copies)

    def hand(self, request: Request, **_: Any) -> object:
        return request.ids  # stands for the interpreter handed to the search

    def let_go(self, held: object, **_: Any) -> None:
        pass

    def withdraw(self, ids: Sequence[str], *, collect: Sequence[str] = (), **_: Any) -> None:
        self.withdrawn.append([*collect, *ids])


@dataclass
class Preparing(HidingStartUps):
    """What it was asked to start ahead: each run's ids and the copies to have waiting."""

    prepared: list[tuple[list[str], int]] = field(default_factory=list)

    def prepare(self, ids: Sequence[str], *, copies: int = 1, **_: Any) -> None:
        self.prepared.append((list(ids), copies))


def test_hinted_runs_of_one_file_for_two_victims_add_up() -> None:
    """gpu_polluted: two victims of one file, each hinted at the same culprit before them:
    each search's run and confirmation take an interpreter of that file, four in all (with
    two, the second victim's runs started cold on the H100)."""
    from gpuci.evidence.search.hinted import prepare_hinted

    culprit = "test_w.py::test_scatter"

    def victim(name: str) -> Task:
        return Task(
            victim=f"test_w.py::{name}",
            category=Category.ORDER_DEPENDENT,
            candidates=(culprit,),
            rank=(0, 0),
            hinted=(culprit,),
            hint=LEDGER,
        )

    prober = Preparing(lambda _, n: Outcome.FAILED)
    prepare_hinted(prober, [victim("test_sum"), victim("test_matmul")])  # type: ignore[arg-type]
    assert prober.prepared == [
        ([culprit, "test_w.py::test_sum"], 2),
        ([culprit, "test_w.py::test_matmul"], 4),
    ]


def test_a_hint_at_several_tests_starts_the_narrowings_runs_too() -> None:
    """torch_polluted on an H200: the ledger pointed at 3 tests; the narrowing's first wave
    ran `[two of them, victim]` beside the three singles, and with only the hint's run and
    the singles started ahead, that run (the hint's files again) started cold: 15 s."""
    from gpuci.evidence.requests import requests_each
    from gpuci.evidence.search.hinted import hinted_runs

    hinted = ("test_a.py::test_mm", "test_b.py::test_caps", "test_d.py::test_small")
    task = Task(
        victim="test_d.py::test_large",
        category=Category.ORDER_DEPENDENT,
        candidates=hinted,
        rank=(0, 0),
        hinted=hinted,
        hint=LEDGER,
    )
    need = {
        frozenset(r.ids): r.copies
        for r in requests_each(hinted_runs(task))  # the copies of one file set add up
    }
    # the hint's run and the halving's [test_mm, test_caps] share their files: two of them
    assert need[frozenset((*hinted, task.victim))] == 2
    # each hinted test before the victim: the wave's run and the confirmation's
    for test in hinted:
        assert need[frozenset((test, task.victim))] == 2
