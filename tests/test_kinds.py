"""The kinds of evidence (`gpuci.evidence.kinds`): one module a kind, behind one Protocol,
listed in one place (the engine's `KINDS`), and the engine's gate: a claim that names
another test is recorded only where its kind's runs show it both ways."""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import os
import threading
from pathlib import Path

import pytest
from cli_runner import gpuci, write_files

from gpuci.evidence.claims import Standing
from gpuci.evidence.classify import GROUP_WITH, GROUP_WITHOUT
from gpuci.evidence.kinds.culprit_search.kind import CulpritSearch
from gpuci.evidence.kinds.engine import KINDS
from gpuci.evidence.kinds.groups import GroupRuns
from gpuci.evidence.kinds.kind import REFUSED, claimed, refused, standing
from gpuci.evidence.kinds.provider_search.kind import ProviderSearch
from gpuci.evidence.notes import OTHER_SIDE_FAILED, UNASKED
from gpuci.evidence.pairs import WITHOUT_VICTIM, partner_note
from gpuci.model import Outcome, Probe, TestEvidence

KINDS_DIR = Path(__file__).resolve().parent.parent / "gpuci" / "evidence" / "kinds"
GPUCI = KINDS_DIR.parent.parent
NOT_KINDS = {"__init__", "kind", "engine"}  # the Protocol and the engine beside the kinds
VICTIM = "test_b_victim.py::test_victim"
CULPRIT = "test_a_culprit.py::test_pollutes"
P, F = Outcome.PASSED, Outcome.FAILED
LONG_S = 60.0  # a wait that only a bug lets run out (the test then fails, it does not hang)


def _kind_files() -> dict[str, list[Path]]:
    """Each kind's files, by kind: its module, or every module of its subpackage."""
    kinds = {p.stem: [p] for p in sorted(KINDS_DIR.glob("*.py")) if p.stem not in NOT_KINDS}
    for package in sorted(p.parent for p in KINDS_DIR.glob("*/__init__.py")):
        kinds[package.name] = sorted(package.glob("*.py"))
    return kinds


def _kind_modules() -> dict[str, ast.Module]:
    """Each kind's code, by kind, as one tree (a subpackage's modules together)."""
    return {
        name: ast.Module(
            body=[n for p in paths for n in ast.parse(p.read_text(encoding="utf-8")).body],
            type_ignores=[],
        )
        for name, paths in _kind_files().items()
    }


def _kind_classes(tree: ast.Module) -> list[str]:
    """The classes of a module that are kinds: they conclude and declare their claims."""
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and {"ahead", "conclude", "claim"}
        <= {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
    ]


def _imported(tree: ast.Module) -> set[str]:
    return {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }


def test_each_kind_module_holds_one_kind_and_the_engine_lists_it_once() -> None:
    # adding a kind touches its module and the engine's list: the list is complete, and
    # holds each kind once
    modules = _kind_modules()
    defined = {}
    for name, tree in modules.items():
        classes = _kind_classes(tree)
        assert len(classes) == 1, f"evidence/kinds/{name}: kinds {classes}, not one"
        defined[classes[0]] = name
    listed = [type(kind).__name__ for kind in KINDS]
    assert sorted(listed) == sorted(defined), "the engine's KINDS and evidence/kinds/ differ"
    assert len({type(kind).__module__ for kind in KINDS}) == len(KINDS)


def test_only_the_engine_enumerates_the_kinds() -> None:
    # no kind imports another, and nothing outside the engine imports a kind: the
    # engine's list is the one place a kind is named (the kinds' own tests aside)
    kinds = {f"gpuci.evidence.kinds.{name}" for name in _kind_files()}

    def kinds_of(modules: set[str]) -> set[str]:
        return {k for k in kinds for m in modules if m == k or m.startswith(f"{k}.")}

    for name, tree in _kind_modules().items():
        others = kinds_of(_imported(tree)) - {f"gpuci.evidence.kinds.{name}"}
        assert not others, f"evidence/kinds/{name} imports another kind: {others}"
    own = {p: f"gpuci.evidence.kinds.{k}" for k, paths in _kind_files().items() for p in paths}
    for path in GPUCI.rglob("*.py"):
        if path == KINDS_DIR / "engine.py":
            continue
        found = kinds_of(_imported(ast.parse(path.read_text(encoding="utf-8"))))
        found.discard(own.get(path, ""))
        assert not found, f"{path.relative_to(GPUCI.parent)} imports the kinds {found}"


# what starts a process: a kind asks the runner (`Prober`) for its runs instead
STARTERS = {
    "subprocess",
    "multiprocessing",
    "gpuci.run.proc.spawn",
    "gpuci.run.proc.interpreter",
    "gpuci.run.proc.held",
    "gpuci.run.proc.launch",
    "gpuci.run.proc.reaper",
}


def _kind_paths() -> list[Path]:
    """Every kind's files, and the searches' shared by two kinds (`gpuci.evidence.search`),
    which are the culprit and provider searches' steps: a search's next level is known
    only once its current one answers, and it declares that level's runs as it goes."""
    shared = sorted((KINDS_DIR.parent / "search").glob("*.py"))
    return [*(p for paths in _kind_files().values() for p in paths), *shared]


def test_no_kind_starts_an_interpreter_itself() -> None:
    for path in _kind_paths():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = _imported(tree) | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
        }
        starts = modules & STARTERS
        assert not starts, f"{_in_evidence(path)}: {starts}"


def _in_evidence(path: Path) -> str:
    return path.relative_to(KINDS_DIR.parent).as_posix()


# the runner's ways to start an interpreter ahead: only the runner's `start_ahead`, from
# requests, may; a kind's own starting ahead (or the shared evidence's it calls: the alone-
# runs', the pairs') would be one more place owning it
AHEAD_CALLS = {"prepare", "prepare_together", "hold", "offer", "offer_seeing"}
RUNNER = {"probe.py", "ahead.py"}  # the one runner: what `start_ahead` and `hand` call


def _outside_the_runner() -> list[Path]:
    return [p for p in sorted(KINDS_DIR.parent.rglob("*.py")) if p.name not in RUNNER]


def test_a_kind_declares_the_runs_it_wants_ahead_as_requests() -> None:
    for path in _outside_the_runner():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        called = {
            n.func.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        }
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        calls = called & AHEAD_CALLS
        assert not calls, f"{_in_evidence(path)}: {calls}"
        starts = {n for n in names if n.startswith("prepare")}
        assert not starts, f"{_in_evidence(path)} imports {starts}"
    for kind in KINDS:
        ahead = type(kind).ahead
        assert ahead.__annotations__["return"] == "list[Request]", kind.name


def test_every_kind_declares_what_the_protocol_asks() -> None:
    fields = {f.name for f in dataclasses.fields(TestEvidence)}
    phases = set()
    for kind in KINDS:
        assert kind.name and kind.phase, kind
        assert kind.owns and kind.owns <= fields, (kind.name, kind.owns - fields)
        phases.add(kind.phase)
    names = [kind.name for kind in KINDS]
    assert len(set(names)) == len(names)
    # the kinds asked in rounds come before those asked once after them
    rounds = [kind.in_rounds for kind in KINDS]
    assert rounds == sorted(rounds, reverse=True)


def _searched(alone: tuple[Outcome, ...], probes: tuple[Outcome, ...]) -> TestEvidence:
    """A victim's evidence as the culprit search records it: its alone-runs, the search's
    runs of it with the culprit (or provider), which it names."""
    return TestEvidence(
        id=VICTIM,
        alone=alone,
        culprits=(CULPRIT,),
        search="bisection",
        probes=tuple(Probe(count=1, shown=(CULPRIT,), outcome=o) for o in probes),
    )


CULPRITS, PROVIDERS = CulpritSearch(), ProviderSearch()


@pytest.mark.parametrize(
    ("kind", "alone", "probes", "expected"),
    [
        (CULPRITS, (P,), (F, F), Standing.STANDS),  # fails after it twice, passes without it
        (CULPRITS, (P,), (F,), Standing.UNREPEATED),  # its failing run seen once: no claim
        (CULPRITS, (P,), (F, F, P), Standing.FLAKY),  # the same command went both ways
        (CULPRITS, (P, F), (F, F), Standing.FAILS_WITHOUT),  # fails without it too: no claim
        (CULPRITS, (), (F, F), Standing.UNASKED),  # never run without it: no claim
        (CULPRITS, (F, F), (F,), Standing.FAILS_WITHOUT),  # fails with it and without
        (CULPRITS, (P, P), (F, F, P), Standing.FLAKY),  # it passes alone: after it, both ways
        (CULPRITS, (P, P), (P, P), Standing.UNREPEATED),  # never failed after it: no claim
        # a provider's halves are the culprit's reversed: alone it fails, with it it passes
        (PROVIDERS, (F, F), (F, P), Standing.STANDS),
        (PROVIDERS, (F,), (P, P), Standing.UNREPEATED),  # failed alone once: not named
        (PROVIDERS, (F, P), (P, P), Standing.FLAKY),  # alone, the same run went both ways
        (PROVIDERS, (F, F), (), Standing.UNASKED),  # never run with it
        (PROVIDERS, (F, F), (F, F), Standing.UNASKED),  # never passed with it
        # with its provider it failed once beside others (the load's, as its search found)
        # and passed strictly: failing in every run alone, it depends on it
        (PROVIDERS, (F, F), (P, F, P), Standing.STANDS),
        # the culprit's halves read as a provider's: it passes alone, no provider stands
        (PROVIDERS, (P, P), (P, P), Standing.UNREPEATED),
    ],
)
def test_the_gate_records_a_search_claim_only_both_ways(
    kind: CulpritSearch | ProviderSearch,
    alone: tuple[Outcome, ...],
    probes: tuple[Outcome, ...],
    expected: Standing,
) -> None:
    after = {VICTIM: _searched(alone, probes)}
    assert standing(kind, after[VICTIM]) is expected
    made = claimed(kind, {}, after)
    assert made == {VICTIM: kind}
    kept = refused(made, {}, after, {})[VICTIM]
    if expected is Standing.STANDS:
        assert kept == after[VICTIM]
    else:
        assert kept.culprits == ()
        assert f"{REFUSED}: {kind.name} named {CULPRIT}: {expected.value}" in kept.search


def test_the_gate_counts_only_the_runs_of_the_command_a_claim_names() -> None:
    # a bisection's wider step failed too: it ran other tests before the victim, not the
    # command that names the culprit, which ran once
    search = CulpritSearch()
    wider = Probe(count=3, shown=("test_a.py::test_x", "test_a.py::test_y", CULPRIT), outcome=F)
    once = dataclasses.replace(_searched((P, P), (F,)), probes=(wider, *_searched((), (F,)).probes))
    assert standing(search, once) is Standing.UNREPEATED
    # the command repeated (a cascade's try and its confirmation are one command)
    twice = dataclasses.replace(
        once, probes=(*once.probes, Probe(count=1, shown=(CULPRIT,), outcome=F, kind="cascade"))
    )
    assert standing(search, twice) is Standing.STANDS


def test_the_gate_reads_a_pair_from_either_side() -> None:
    # contention is symmetric: a pair run where only the other side failed its way shows
    # it; a partner's own claim is its runs beside the victim and its run without it
    search = CulpritSearch()
    partner_file = CULPRIT.partition("::")[0]
    pair = TestEvidence(
        id=VICTIM,
        alone=(P, P),
        culprits=(partner_file,),
        search="pair: 3 run(s), confirmed twice",
        probes=(
            Probe(count=1, shown=(partner_file,), outcome=F),
            Probe(count=1, shown=(partner_file,), outcome=P, kind=OTHER_SIDE_FAILED),
            Probe(count=1, shown=(partner_file,), outcome=P, kind=UNASKED),
        ),
    )
    assert standing(search, pair) is Standing.STANDS
    partner = TestEvidence(
        id=CULPRIT,
        culprits=(VICTIM,),
        search=partner_note(VICTIM, 3),
        probes=(
            Probe(count=1, shown=(VICTIM,), outcome=P, kind=OTHER_SIDE_FAILED),
            Probe(count=1, shown=(VICTIM,), outcome=F),
            Probe(count=0, shown=(), outcome=P, kind=WITHOUT_VICTIM),
        ),
    )
    assert standing(search, partner) is Standing.STANDS
    # a pair run where neither side failed: the pair command went both ways
    calm = Probe(count=1, shown=(partner_file,), outcome=P)
    assert standing(search, dataclasses.replace(pair, probes=(*pair.probes, calm))) is (
        Standing.FLAKY
    )
    # a partner that fails without the victim too is no partner
    alone_fails = Probe(count=0, shown=(), outcome=F, kind=WITHOUT_VICTIM)
    assert (
        standing(search, dataclasses.replace(partner, probes=(*partner.probes[:2], alone_fails)))
        is Standing.FAILS_WITHOUT
    )


def test_the_gate_counts_the_alone_runs_a_mode_job_made() -> None:
    # `gpuci run` jobs rerun their suspects alone inside their modes; `gpuci explain` then
    # searches without rerunning them: those runs are the claim's other half
    search = CulpritSearch()
    after = {VICTIM: _searched((), (F, F))}
    made = claimed(search, {}, after)
    assert refused(made, {}, after, {})[VICTIM].culprits == ()
    assert refused(made, {}, after, {VICTIM: (P, P)})[VICTIM] == after[VICTIM]
    # and where they failed too, the victim fails without its culprit: no claim
    assert refused(made, {}, after, {VICTIM: (F, F)})[VICTIM].culprits == ()


def test_the_gate_holds_a_group_claim_to_its_repeats() -> None:
    groups = GroupRuns()

    def grouped(with_them: tuple[Outcome, ...], without: tuple[Outcome, ...]) -> TestEvidence:
        probes = [Probe(count=1, shown=(CULPRIT,), outcome=o, kind=GROUP_WITH) for o in with_them]
        probes += [Probe(count=0, shown=(), outcome=o, kind=GROUP_WITHOUT) for o in without]
        return TestEvidence(id=VICTIM, culprits=(CULPRIT,), probes=tuple(probes))

    assert standing(groups, grouped((F, F), (P,))) is Standing.STANDS
    # one failing run: a group claim needs its failing run repeated
    assert standing(groups, grouped((F,), (P,))) is Standing.UNREPEATED
    assert standing(groups, grouped((F, F), (F,))) is Standing.FAILS_WITHOUT
    assert standing(groups, grouped((F, F), ())) is Standing.UNASKED
    # a claim kept from before is no new claim of this kind's
    before = {VICTIM: grouped((F, F), (P,))}
    assert claimed(groups, before, before) == {}


# A victim an earlier file's test pollutes (an environment variable, in-process state), and
# whose runs in the evidence with nothing before it alternate: its first alone-run passes,
# its second fails. Its culprit search runs it after the culprit, where it fails: the
# search names the culprit, and only the later alone-run shows it failing without it.
ALTERNATING = {
    "test_a_culprit.py": """
        import os

        def test_pollutes():
            os.environ["KINDS_POLLUTED"] = "1"
    """,
    "test_b_victim.py": """
        import os
        from pathlib import Path

        def test_victim():
            assert "KINDS_POLLUTED" not in os.environ, "polluted by an earlier test"
            if os.environ.get("GPUCI_MODE") == "evidence":
                counter = Path(os.environ["KINDS_COUNTER"])
                n = int(counter.read_text()) + 1 if counter.exists() else 1
                counter.write_text(str(n))
                assert n % 2, f"run {n} with nothing before it failed"
    """,
}


@pytest.mark.slow
def test_a_culprit_whose_victim_later_fails_without_it_is_not_recorded(tmp_path: Path) -> None:
    suite = write_files(tmp_path / "suite", ALTERNATING)
    env = dict(os.environ, KINDS_COUNTER=str(tmp_path / "counter"))
    proc = gpuci("check", ".", "--out", "out", "--timeout", "30", cwd=suite, env=env)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    evidence = json.loads((suite / "out" / "evidence" / "evidence.json").read_text())
    victim = next(t for t in evidence["tests"] if t["id"] == VICTIM)
    # the search's runs after the culprit failed, its alone-runs went both ways
    assert victim["alone"] == ["passed", "failed"], victim
    assert any(p["outcome"] == "failed" for p in victim["probes"]), victim
    assert not victim.get("culprits"), victim
    assert f"{REFUSED}: culprit search named {CULPRIT}" in victim["search"], victim
    verdict = json.loads((suite / "out" / "verdict.json").read_text())
    tests = {t["id"]: t for t in verdict["tests"]}
    assert tests[VICTIM]["category"] == "flaky", tests[VICTIM]
    assert not tests[VICTIM].get("culprits"), tests[VICTIM]


# A test that needs an earlier file's test (an environment variable it sets) and whose
# runs in the evidence alone alternate: its first alone-run fails, its second passes. The
# search finds its provider (it passes after it); the run its claim stands on, the victim
# without its provider failing, is made once more before the provider is named, and passes.
ALTERNATING_ALONE = {
    "test_a_culprit.py": """
        import os

        def test_pollutes():
            os.environ["KINDS_PROVIDED"] = "1"
    """,
    "test_b_victim.py": """
        import os
        import sys
        from pathlib import Path

        def test_victim():
            # alone: nothing else even imported (a search's run with files collected is not)
            alone = not any(m.endswith("test_a_culprit") for m in sys.modules)
            if os.environ.get("GPUCI_MODE") == "evidence" and alone:
                counter = Path(os.environ["KINDS_COUNTER"])
                n = int(counter.read_text()) + 1 if counter.exists() else 1
                counter.write_text(str(n))
                assert n % 2 == 0, f"run {n} with nothing before it failed"
                return
            assert "KINDS_PROVIDED" in os.environ, "needs an earlier test"
    """,
}


@pytest.mark.slow
def test_a_provider_is_named_only_once_its_victim_failed_without_it_twice(
    tmp_path: Path,
) -> None:
    suite = write_files(tmp_path / "suite", ALTERNATING_ALONE)
    env = dict(os.environ, KINDS_COUNTER=str(tmp_path / "counter"))
    proc = gpuci("check", ".", "--out", "out", "--timeout", "30", cwd=suite, env=env)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    evidence = json.loads((suite / "out" / "evidence" / "evidence.json").read_text())
    victim = next(t for t in evidence["tests"] if t["id"] == VICTIM)
    # it passed after its provider; alone it failed once, then, the same run, passed
    alone = [*victim["alone"], *(p["outcome"] for p in victim["probes"] if p["count"] == 0)]
    assert alone[:2] == ["failed", "passed"], victim
    assert not victim.get("culprits"), victim
    assert f"{REFUSED}: provider search named {CULPRIT}" in victim["search"], victim
    verdict = json.loads((suite / "out" / "verdict.json").read_text())
    tests = {t["id"]: t for t in verdict["tests"]}
    assert tests[VICTIM]["category"] == "flaky", tests[VICTIM]
    assert not tests[VICTIM].get("providers"), tests[VICTIM]


@dataclasses.dataclass
class _Repeating:
    """A runner that records each run (its ids and collected files) and fails the victim."""

    runs: list[tuple[list[str], list[str]]] = dataclasses.field(default_factory=list)

    def exhausted(self) -> bool:
        return False

    def stopping(self) -> bool:
        return False

    def run(self, ids: list[str], *, collect: list[str], **_: object) -> object:
        self.runs.append((list(ids), list(collect)))
        return _Failed()


class _Failed:
    def outcome(self, test_id: str) -> Outcome:
        return F


def test_a_claims_deciding_run_is_repeated_once_and_as_it_ran() -> None:
    from gpuci.evidence.context import Context
    from gpuci.state.left import Ledger

    runner = _Repeating()
    ctx = Context(
        prober=runner,  # type: ignore[arg-type]
        results={},
        orders={},
        progress=io.StringIO(),
        ledger=Ledger(),
    )
    search = CulpritSearch()
    # the victim failed once after exactly its culprit: that run, once more, and no other
    once = _searched((P, P), (F,))
    again = search._repeated(ctx, once, None, ())
    assert runner.runs == [([CULPRIT, VICTIM], [])]
    assert standing(search, again) is Standing.STANDS
    # a file it was named on is collected, none of its tests run, as its search ran it
    runner.runs.clear()
    named_file = dataclasses.replace(once, culprits=("test_a_culprit.py",), probes=())
    search._repeated(ctx, named_file, None, ())
    assert runner.runs[0] == ([VICTIM], ["test_a_culprit.py"])
    # runs it made already count: a claim shown twice is not run again
    runner.runs.clear()
    search._repeated(ctx, _searched((P, P), (F, F)), None, ())
    assert runner.runs == []


def test_requests_of_several_groups_add_up_per_interpreter() -> None:
    """The likely runs are declared in groups (the alone-runs, each search's runs), each
    counting the interpreters its own runs need; the runner keeps that many waiting, so a
    victim's two alone-runs and its search's run of its own file alone need three, not two
    (the last alone-run of torch_polluted's victim started cold)."""
    from gpuci.evidence.requests import Request, added_up

    alone = [Request(ids=("test_d.py::test_large",), strict=True, copies=2)]
    search = [
        Request(ids=("test_d.py::test_small", "test_d.py::test_large"), strict=True, copies=1),
        Request(ids=("test_b.py::test_caps", "test_d.py::test_large"), strict=True, copies=2),
    ]
    poisoned = [Request(ids=("test_d.py::test_large",), env=(("GPUCI_POISON", "1"),), copies=1)]
    summed = added_up(alone, search, poisoned)
    assert [r.copies for r in summed] == [2, 3, 2, 1]  # another environment: its own


@dataclasses.dataclass
class _Answering:
    """A kind that answers `tests` with its `name` as their search, after waiting at
    `meeting` for every kind that meets there (a kind concluding alone would wait in vain)."""

    name: str
    tests: tuple[str, ...]
    beside: bool
    meeting: threading.Barrier | None = None
    phase: str = "culprits"
    owns: frozenset[str] = frozenset({"search"})
    in_rounds: bool = True

    def ahead(self, ctx: object, state: object, found: object) -> list[object]:
        return []

    def conclude(
        self, ctx: object, state: object, found: dict[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        if self.meeting is not None:
            self.meeting.wait(timeout=LONG_S)
        answered = dict(found)
        for test_id in self.tests:
            answered[test_id] = TestEvidence(id=test_id, search=self.name)
        return answered

    def claim(self, evidence: TestEvidence) -> None:
        return None


class _Declared:
    def start_ahead(self, requests: object) -> None:
        pass


def test_a_kind_beside_the_one_before_it_concludes_with_it() -> None:
    # the provider search goes beside the culprit search: both conclude at once from the
    # same evidence, each answers its own tests, and where both answered one test (a
    # partner's entry of one search, the victim's own search of the other) the later's stands
    from gpuci.evidence.context import Context
    from gpuci.evidence.kinds.engine import _each
    from gpuci.evidence.kinds.kind import Round
    from gpuci.state.left import Ledger

    assert [type(k) for k in KINDS].index(ProviderSearch) == [type(k) for k in KINDS].index(
        CulpritSearch
    ) + 1
    assert ProviderSearch.beside and not CulpritSearch.beside
    meeting = threading.Barrier(2)
    first = _Answering("first", ("test_a.py::test_a", "test_c.py::test_c"), False, meeting)
    second = _Answering("second", ("test_b.py::test_b", "test_c.py::test_c"), True, meeting)
    after = _Answering("after", ("test_d.py::test_d",), False)
    ctx = Context(
        prober=_Declared(),  # type: ignore[arg-type]
        results={},
        orders={},
        progress=io.StringIO(),
        ledger=Ledger(),
    )
    found = _each(ctx, [first, second, after], Round(wanted={}), {}, {})  # type: ignore[list-item]
    assert {i: e.search for i, e in found.items()} == {
        "test_a.py::test_a": "first",
        "test_b.py::test_b": "second",
        "test_c.py::test_c": "second",
        "test_d.py::test_d": "after",
    }
    assert not meeting.broken
