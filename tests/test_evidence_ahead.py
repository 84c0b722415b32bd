"""Evidence runs started ahead (`gpuci.evidence.ahead`): the next strict run's interpreter
starts and collects while the current one runs, then runs its tests fresh when its turn
comes; one never taken is killed before any test.

Each interpreter of the suite below records when its conftest.py was imported (its
start-up) and when its test ran, by pid, so the tests see which interpreter ran what."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import gpuci, needs_run_parallel, write_files

from gpuci.evidence import ahead as ahead_module
from gpuci.evidence.admission import Admission
from gpuci.evidence.ahead import Ahead
from gpuci.evidence.early import first_alone_runs
from gpuci.evidence.probe import Prober
from gpuci.evidence.requests import Request
from gpuci.evidence.results import ModeResults
from gpuci.model import Mode, ModeRun, Outcome, TestResult
from gpuci.run.proc.discover import child_env
from gpuci.run.proc.interpreter import Interpreters
from gpuci.run.proc.supervisor import Supervisor

# Each mark is written whole or not at all (renamed into place): the test polls for them
# while the interpreters write, and under load it read one created but not yet written.
CONFTEST = """
import os, time

MARKS = os.path.join(os.path.dirname(__file__), "marks")
os.makedirs(MARKS, exist_ok=True)


def mark(name):
    path = os.path.join(MARKS, name)
    with open(path + ".part", "w") as f:
        f.write(repr(time.time()))
    os.replace(path + ".part", path)


mark(f"imported-{os.getpid()}")
"""
TEST = """
import os, time

from conftest import mark


def test_{name}():
    mark(f"ran-{name}-{{os.getpid()}}")
    time.sleep(0.3)
    mark(f"done-{name}-{{os.getpid()}}")
"""


@pytest.fixture
def prober(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Prober]:
    made = _prober(tmp_path, monkeypatch, (None,))
    yield made
    made.close()


@pytest.fixture
def two_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Prober]:
    """A prober of a check on 2 GPUs (the views only name them: nothing here uses CUDA)."""
    made = _prober(tmp_path, monkeypatch, ("0,1", "1,0"))
    yield made
    made.close()


def _prober(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, views: tuple[str | None, ...]
) -> Prober:
    files = {"conftest.py": CONFTEST, "pytest.ini": "[pytest]\n"}
    files |= {f"test_{n}.py": TEST.format(name=n) for n in "abc"}
    root = write_files(tmp_path / "suite", files)
    monkeypatch.chdir(root)
    interpreters = Interpreters(
        out=tmp_path / "out",
        python=sys.executable,
        pytest_args=(),
        timeout=120,
        environ=child_env(os.environ),
        clock_zero=time.monotonic(),
        supervisor=Supervisor(),
    )
    admission = Admission(slots=2, devices=len(views))
    ahead = Ahead(interpreters, admission, views, root, limit=2, on=True)
    return Prober(interpreters, root, views[0], None, views=views, ahead=ahead, admission=admission)


def marks(prober: Prober, kind: str, name: str = "") -> dict[int, float]:
    """By pid: when its conftest was imported (`imported`), or its test ran or ended."""
    folder = prober.rootdir / "marks"
    prefix = f"{kind}-{name}-" if name else f"{kind}-"
    found = {}
    for path in folder.glob(f"{prefix}*"):
        pid = path.name.removeprefix(prefix)
        if pid.isdigit():
            found[int(pid)] = float(path.read_text())
    return found


def started_ahead(prober: Prober, count: int) -> dict[int, float]:
    """Waits until `count` interpreters imported their conftest, before any run is asked
    for: only the offers can have started them (a loaded machine only makes it wait)."""
    deadline = time.monotonic() + 120
    while len(found := marks(prober, "imported")) < count:
        assert time.monotonic() < deadline, found
        time.sleep(0.02)
    return found


def ahead_json(prober: Prober) -> dict[str, int]:
    assert prober.ahead is not None
    return prober.ahead.to_json()


def ran_by(prober: Prober, name: str) -> int:
    """The pid of the one interpreter that ran test_NAME."""
    pids = list(marks(prober, "ran", name))
    assert len(pids) == 1, pids
    return pids[0]


@pytest.mark.slow
def test_the_next_strict_run_offered_ahead_collects_before_its_turn(prober: Prober) -> None:
    prober.prepare(["test_b.py::test_b"], strict=True)
    started_ahead(prober, 1)  # b's interpreter, started by its offer alone
    first = prober.run(["test_a.py::test_a"], phase="alone", label="a", strict=True)
    asked = time.time()  # the run of b is asked for only now
    second = prober.run(["test_b.py::test_b"], phase="alone", label="b", strict=True)
    assert first.outcome("test_a.py::test_a") is Outcome.PASSED
    assert second.outcome("test_b.py::test_b") is Outcome.PASSED
    assert ahead_json(prober) == {"ahead": 1, "ahead_taken": 1}
    b = ran_by(prober, "b")
    assert marks(prober, "imported")[b] < asked  # its start-up was paid before its turn
    assert marks(prober, "ran", "b")[b] >= asked  # its test ran only in its own turn
    assert b != ran_by(prober, "a")  # a fresh interpreter of its own


@pytest.mark.slow
def test_a_strict_run_waiting_for_its_turn_starts_ahead_and_never_overlaps(
    prober: Prober,
) -> None:
    outcomes: dict[str, Outcome] = {}

    def one(name: str) -> None:
        test_id = f"test_{name}.py::test_{name}"
        ran = prober.run([test_id], phase="alone", label=name, strict=True)
        outcomes[name] = ran.outcome(test_id)

    threads = [threading.Thread(target=one, args=(n,)) for n in "ab"]
    threads[0].start()
    deadline = time.monotonic() + 120
    while not marks(prober, "ran", "a"):  # a runs: b, asked now, must wait for its turn
        assert time.monotonic() < deadline
        time.sleep(0.02)
    threads[1].start()
    for thread in threads:
        thread.join()
    assert outcomes == {"a": Outcome.PASSED, "b": Outcome.PASSED}
    assert ahead_json(prober) == {"ahead": 1, "ahead_taken": 1}
    runs = sorted(
        (marks(prober, "ran", n)[ran_by(prober, n)], marks(prober, "done", n)[ran_by(prober, n)])
        for n in "ab"
    )
    assert runs[0][1] <= runs[1][0]  # strict: the second test began after the first ended


@pytest.mark.slow
def test_an_interpreter_offered_and_never_taken_runs_no_test(prober: Prober) -> None:
    prober.prepare(["test_c.py::test_c"], strict=True)
    prober.run(["test_a.py::test_a"], phase="alone", label="a", strict=True)
    assert prober.ahead is not None
    assert prober.ahead.close() == 1
    assert not marks(prober, "ran", "c")
    assert ahead_json(prober) == {"ahead": 1, "ahead_taken": 0}


@pytest.mark.slow
def test_copies_offered_for_as_many_runs_of_one_file_serve_each(prober: Prober) -> None:
    prober.prepare(["test_b.py::test_b"], strict=True, copies=2)
    prober.prepare(["test_b.py::test_b"], strict=True, copies=2)  # two wait already: none
    ahead = started_ahead(prober, 2)  # both copies, before any run was asked for
    prober.run(["test_a.py::test_a"], phase="alone", label="a", strict=True)
    for _ in range(2):
        ran = prober.run(["test_b.py::test_b"], phase="alone", label="b", strict=True)
        assert ran.outcome("test_b.py::test_b") is Outcome.PASSED
    # both started ahead and both taken (the account's word, not the clock's: how far a
    # copy got before its run was asked is the machine's load)
    assert ahead_json(prober) == {"ahead": 2, "ahead_taken": 2}
    b_pids = marks(prober, "ran", "b")
    assert len(b_pids) == 2  # each run its own fresh interpreter
    assert set(b_pids) == set(ahead)  # the two started ahead, each taken by one run


# four interpreters, started and run: about 1 CPU-s on an idle machine, 2.5 on a loaded one
@pytest.mark.slow
def test_runs_of_one_file_at_once_each_take_an_interpreter_started_ahead(prober: Prober) -> None:
    """A hinted search's wave ran its runs of the victim's file side by side, each in a lane
    of its own (its own journal, log and pytest cache): the interpreters started ahead
    carried the first lane's cache in their command, so every other lane's run ended its
    interpreter as unlike and started cold (torch_polluted: 15 s each on an H200)."""
    prober.prepare(["test_b.py::test_b"], copies=2)
    ahead = started_ahead(prober, 2)
    runs = [
        threading.Thread(
            target=prober.run, args=(["test_b.py::test_b"],), kwargs={"phase": "x", "label": "b"}
        )
        for _ in range(2)
    ]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    b_pids = marks(prober, "ran", "b")
    assert len(b_pids) == 2 and set(b_pids) == set(ahead)
    assert ahead_json(prober) == {"ahead": 2, "ahead_taken": 2}


def test_a_search_step_held_ahead_takes_an_interpreter_its_kind_declared(prober: Prober) -> None:
    """A search declares its next step's run as it goes, and the runner hands it that run's
    interpreter (`Prober.hand`) while its current runs go on; where a kind declared that run
    and its interpreter waits already, that one is it, not a second one started then (the
    hinted culprit's confirmation started cold)."""
    prober.prepare(["test_b.py::test_b"], strict=True)
    ahead = started_ahead(prober, 1)
    handed = prober.hand(Request(ids=("test_b.py::test_b",), strict=True), label="step")
    prober.run(["test_b.py::test_b"], phase="culprits", label="b", strict=True, handed=handed)
    assert ran_by(prober, "b") in ahead
    assert ahead_json(prober) == {"ahead": 1, "ahead_taken": 1}


@pytest.mark.slow
def test_offers_beyond_the_limit_start_in_order_as_others_are_taken(prober: Prober) -> None:
    for name in "abc":
        prober.prepare([f"test_{name}.py::test_{name}"], strict=True)
    assert ahead_json(prober) == {"ahead": 2, "ahead_taken": 0}  # its limit: 2 at once
    for name in "abc":  # a's taken: c's starts, and is taken in its turn
        test_id = f"test_{name}.py::test_{name}"
        ran = prober.run([test_id], phase="alone", label=name, strict=True)
        assert ran.outcome(test_id) is Outcome.PASSED
    assert ahead_json(prober) == {"ahead": 3, "ahead_taken": 3}
    assert len(marks(prober, "imported")) == 3  # none started twice


@pytest.mark.slow
def test_a_run_asked_before_its_queued_offer_started_takes_it_back(prober: Prober) -> None:
    for name in "abc":
        prober.prepare([f"test_{name}.py::test_{name}"], strict=True)
    prober.run(["test_c.py::test_c"], phase="alone", label="c", strict=True)  # fresh, now
    for name in "ab":
        prober.run([f"test_{name}.py::test_{name}"], phase="alone", label=name, strict=True)
    assert ahead_json(prober) == {"ahead": 2, "ahead_taken": 2}
    assert len(marks(prober, "imported")) == 3  # c's offer never started an interpreter


@pytest.mark.slow
def test_one_held_idle_too_long_makes_room_for_one_offered_later(
    prober: Prober, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ahead_module, "STALE_S", 0.0)  # every one held is stale
    for name in "ab":
        prober.prepare([f"test_{name}.py::test_{name}"], strict=True)
    prober.prepare(["test_c.py::test_c"], strict=True)  # at the limit: a's, the oldest, goes
    ran = prober.run(["test_c.py::test_c"], phase="alone", label="c", strict=True)
    assert ran.outcome("test_c.py::test_c") is Outcome.PASSED
    assert ahead_json(prober) == {"ahead": 3, "ahead_taken": 1}  # c's was started ahead
    assert prober.ahead is not None and prober.ahead.close() == 1  # b's waits still
    assert not marks(prober, "ran", "a") and not marks(prober, "ran", "b")


@pytest.mark.slow
def test_one_offered_for_a_certain_run_is_never_ended_to_make_room(
    prober: Prober, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a run in threads, offered as the classification knew it, waits out the searches
    monkeypatch.setattr(ahead_module, "STALE_S", 0.0)  # every one held is stale
    prober.prepare(["test_a.py::test_a"], strict=True, certain=True)
    prober.prepare(["test_b.py::test_b"], strict=True)
    prober.prepare(["test_c.py::test_c"], strict=True)  # at the limit: b's goes, not a's
    ran = prober.run(["test_a.py::test_a"], phase="threads", label="a", strict=True)
    assert ran.outcome("test_a.py::test_a") is Outcome.PASSED
    assert ahead_json(prober) == {"ahead": 3, "ahead_taken": 1}  # a's was started ahead
    assert prober.ahead is not None and prober.ahead.close() == 1  # c's waits still
    assert not marks(prober, "ran", "b")


@pytest.mark.slow
def test_a_pair_takes_interpreters_started_ahead_and_meets_at_its_rendezvous(
    prober: Prober,
) -> None:
    sides = [(["test_a.py::test_a"], None), (["test_b.py::test_b"], None)]
    prober.prepare_together(sides)
    runs, met = prober.run_together(sides, phase="culprits", label="pair")
    assert [r.outcome(ids[0]) for r, (ids, _) in zip(runs, sides, strict=True)] == [
        Outcome.PASSED,
        Outcome.PASSED,
    ]
    assert met == 2  # both got to their first test: the rendezvous, handed over at release
    assert ahead_json(prober) == {"ahead": 2, "ahead_taken": 2}
    assert len(marks(prober, "imported")) == 2  # no side started again


@pytest.mark.slow
def test_an_offer_withdrawn_is_dropped_or_its_latest_interpreter_ended(prober: Prober) -> None:
    for name in "abc":  # c's offer waits for room (the limit: 2)
        prober.prepare([f"test_{name}.py::test_{name}"], strict=True)
    prober.withdraw(["test_c.py::test_c"], strict=True)  # its run will not come: dropped
    prober.withdraw(["test_b.py::test_b"], strict=True)  # started already: ended
    prober.run(["test_a.py::test_a"], phase="alone", label="a", strict=True)
    assert ahead_json(prober) == {"ahead": 2, "ahead_taken": 1}
    assert prober.ahead is not None and prober.ahead.close() == 0  # nothing left over
    assert not marks(prober, "ran", "b") and not marks(prober, "ran", "c")


@pytest.mark.slow
def test_a_run_asking_while_its_queued_offer_starts_waits_for_it_and_takes_it(
    prober: Prober, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b's offer is popped from the queue (a's run took a's) and its start is slow: b's run,
    asked meanwhile, finds neither its offer nor its interpreter pooled, and must wait for
    the start instead of starting one of its own beside it (on the H100 the run started
    cold, and the interpreter started for it idled to the end)."""
    assert prober.ahead is not None
    prober.ahead.limit = 1
    popped = threading.Event()
    hold = prober.interpreters.hold

    def slow_hold(launch: Any) -> Any:
        if "test_b.py" in launch.targets[-1]:
            popped.set()
            time.sleep(1.0)  # a start that takes a while to return
        return hold(launch)

    monkeypatch.setattr(prober.interpreters, "hold", slow_hold)
    for name in "ab":
        prober.prepare([f"test_{name}.py::test_{name}"], strict=True)
    a = threading.Thread(
        target=prober.run, args=(["test_a.py::test_a"],), kwargs={"phase": "a", "label": "a"}
    )
    a.start()
    assert popped.wait(120)
    ran = prober.run(["test_b.py::test_b"], phase="alone", label="b")
    a.join()
    assert ran.outcome("test_b.py::test_b") is Outcome.PASSED
    assert ahead_json(prober) == {"ahead": 2, "ahead_taken": 2}
    assert len(marks(prober, "imported")) == 2  # b's run started none of its own


@pytest.mark.slow
def test_renewed_interpreters_of_the_first_runs_wait_on_and_the_others_end(
    prober: Prober, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started while the isolated pass ran: as the evidence begins, a's (its first run's)
    waits on, idle from now, and b's, whose run the isolated pass made unlikely, is ended."""
    assert prober.ahead is not None
    for name in "ab":
        prober.prepare([f"test_{name}.py::test_{name}"], strict=True)
    monkeypatch.setattr(ahead_module, "STALE_S", 5.0)  # the isolated pass took longer
    for _, held in prober.ahead._pool:
        held.started -= 10.0
    assert prober.ahead.renew({"test_a.py"}) == 1
    prober.prepare(["test_c.py::test_c"], strict=True)  # room: b's place
    prober.prepare(["test_b.py::test_b"], strict=True)  # at the limit: a's is not stale
    ran = prober.run(["test_a.py::test_a"], phase="alone", label="a", strict=True)
    assert ran.outcome("test_a.py::test_a") is Outcome.PASSED
    assert ahead_json(prober) == {"ahead": 4, "ahead_taken": 1}  # a, b, c; b again once a's went
    assert not marks(prober, "ran", "b")


@pytest.mark.slow
def test_where_start_ups_are_cheap_nothing_starts_ahead(prober: Prober) -> None:
    assert prober.ahead is not None
    prober.ahead.on = False
    prober.prepare(["test_b.py::test_b"], strict=True)
    prober.run(["test_a.py::test_a"], phase="alone", label="a", strict=True)
    prober.run(["test_b.py::test_b"], phase="alone", label="b", strict=True)
    assert ahead_json(prober) == {}
    assert len(marks(prober, "imported")) == 2


SLOW_START = "import time\n\ntime.sleep(1.2)  # every interpreter's start-up: worth hiding\n"
CHECKED = {
    "conftest.py": SLOW_START,
    "pytest.ini": "[pytest]\n",
    "state.py": "FLAG = False\n",
    "test_a.py": """
        import state


        def test_a_sets_flag():
            state.FLAG = True  # never cleared
        """,
    "test_b.py": """
        import state


        def test_b_needs_clear_flag():
            assert not state.FLAG
        """,
    "test_c.py": """
        def test_c_broken():
            raise RuntimeError("backend not configured")


        def test_c_other_broken():
            raise KeyError("missing")
        """,
}


@pytest.mark.slow
def test_a_check_whose_start_ups_are_slow_starts_evidence_ahead_and_concludes_the_same(
    tmp_path: Path,
) -> None:
    suite, out, _ = checked(tmp_path, CHECKED, "--workers", "2", "--modes", "suite,parallel")
    verdict, evidence = read_json(out / "verdict.json"), read_json(out / EVIDENCE)
    tests = {t["id"]: t for t in verdict["tests"]}
    assert tests["test_b.py::test_b_needs_clear_flag"]["category"] == "order-dependent"
    victim = tests["test_b.py::test_b_needs_clear_flag"]
    assert victim["culprits"] == ["test_a.py::test_a_sets_flag"]
    assert tests["test_c.py::test_c_broken"]["category"] == "failed"
    assert tests["test_c.py::test_c_other_broken"]["category"] == "failed"
    concurrency = evidence["concurrency"]
    assert concurrency["ahead"] >= 1 and concurrency["ahead_taken"] >= 1, concurrency
    assert not _running_in(suite)  # those never taken were killed with the check


EVIDENCE = Path("evidence") / "evidence.json"


def checked(tmp_path: Path, files: dict[str, str], *args: str) -> tuple[Path, Path, str]:
    """`gpuci check . ARGS` of the suite `files` (written under `tmp_path`), which finds
    something (exit 1): the suite's folder, OUT, and what gpuci printed."""
    suite = write_files(tmp_path / "suite", files)
    out = tmp_path / "out"
    proc = gpuci("check", ".", "--out", str(out), *args, cwd=suite)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return suite, out, proc.stderr


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _running_in(folder: Path) -> list[int]:
    """The processes whose working directory is `folder`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cwd").resolve() == folder.resolve():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_a_run_beside_others_on_several_gpus_takes_one_started_ahead_on_its_gpu(
    two_gpus: Prober,
) -> None:
    # a run beside others starts on the GPU with the least kept: which that is when its
    # turn comes is not known when it is offered, so it takes one started on any GPU
    two_gpus.prepare(["test_b.py::test_b"])
    two_gpus.prepare(["test_c.py::test_c"])
    two_gpus.run(["test_a.py::test_a"], phase="alone", label="a", strict=True)
    asked = time.time()
    done: dict[str, Outcome] = {}

    def one(name: str) -> None:
        test_id = f"test_{name}.py::test_{name}"
        done[name] = two_gpus.run([test_id], phase="alone", label=name).outcome(test_id)

    threads = [threading.Thread(target=one, args=(n,)) for n in "bc"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert done == {"b": Outcome.PASSED, "c": Outcome.PASSED}
    assert ahead_json(two_gpus) == {"ahead": 2, "ahead_taken": 2}
    for name in "bc":
        assert marks(two_gpus, "imported")[ran_by(two_gpus, name)] < asked


def test_admission_keeps_a_run_on_the_gpu_its_interpreter_started_on_where_it_fits() -> None:
    admission = Admission(slots=4, devices=2, capacity_mib=80_000)
    with admission.admitted(strict=False, need_mib=30_000) as first:
        assert first.device == 0
        # GPU 1 keeps less, but the run's interpreter started ahead on GPU 0, which holds it
        with admission.admitted(strict=False, need_mib=30_000, prefer=0) as second:
            assert second.device == 0
        # where GPU 0 no longer holds it, the other GPU (its interpreter is not taken)
        with admission.admitted(strict=False, need_mib=60_000, prefer=0) as third:
            assert third.device == 1


PROVIDED = {
    "conftest.py": SLOW_START,
    "pytest.ini": "[pytest]\n",
    "state.py": "PROVIDED = False\n",
    "test_a.py": """
        import state

        state.PROVIDED = True  # at import: what test_b needs, whether or not a test runs


        def test_a():
            pass
        """,
    "test_b.py": """
        import state


        def test_b_needs_a_provider():
            assert state.PROVIDED
        """,
    "test_c.py": """
        def test_c():
            pass
        """,
}


@pytest.mark.slow
def test_where_start_ups_are_worth_hiding_each_likely_run_finds_its_interpreter_started(
    tmp_path: Path,
) -> None:
    """A depends-on-others victim whose start-ups take 1.2 s (worth hiding, not expensive):
    its two alone-runs, its run with the other files collected, the halving's runs and the
    confirmation each take an interpreter started ahead (before: only its first alone-run,
    each later one paid its start-up while the GPU idled)."""
    suite, out, _ = checked(tmp_path, PROVIDED, "--workers", "4", "--modes", "suite,parallel")
    verdict, evidence = read_json(out / "verdict.json"), read_json(out / EVIDENCE)
    victim = next(t for t in verdict["tests"] if t["id"] == "test_b.py::test_b_needs_a_provider")
    assert victim["category"] == "depends-on-others"
    assert victim["providers"] == ["test_a.py"]
    # alone twice (failed both), every other file collected, the halving's wave, confirmed
    assert evidence["runs"] == 5, evidence
    assert evidence["concurrency"]["ahead_taken"] >= evidence["runs"], evidence["concurrency"]
    assert not _running_in(suite)  # those never taken were killed with the check


# A likely failure that is not: test_x.py's second test fails after its first in every
# interpreter of its own file, yet passes in the suite (test_a.py's import, collected there
# first, keeps the first from leaving its flag) and alone: an order-dependent victim, not
# one that depends on others.
UNLIKELY = {
    "conftest.py": SLOW_START,
    "pytest.ini": "[pytest]\n",
    "state.py": "FLAG = False\nQUIET = False\n",
    "test_a.py": """
        import state

        state.QUIET = True  # at import


        def test_a():
            pass
        """,
    "test_x.py": """
        import state


        def test_leaves_flag():
            if not state.QUIET:
                state.FLAG = True


        def test_needs_no_flag():
            assert not state.FLAG
        """,
}


@pytest.mark.slow
def test_what_was_started_for_a_likely_failure_is_ended_once_it_passes_alone(
    tmp_path: Path,
) -> None:
    """Its second alone-run and its depends-on-others search's two runs (test_a.py
    collected: the run, its confirmation) were offered; two at once, so the search's waited
    queued, and the first may start as the first alone-run takes its interpreter. Once it
    passed alone, the search's are ended or dropped before the copy is, whose place would
    start the second (before: both started and idled in the places of the runs after
    them; on the H100, 14 such interpreters, and the confirmations started cold)."""
    modes = ("--modes", "suite,parallel,isolated")
    suite, out, _ = checked(tmp_path, UNLIKELY, "--workers", "1", *modes)
    verdict = read_json(out / "verdict.json")
    victim = next(t for t in verdict["tests"] if t["id"] == "test_x.py::test_needs_no_flag")
    assert victim["category"] == "order-dependent"
    assert victim["culprits"] == ["test_x.py::test_leaves_flag"]
    # at most the one started as the first alone-run took its interpreter (none where that
    # interpreter started while the isolated pass ran); before, the second as well
    assert len(_started_collecting(out, "test_a.py::test_a")) <= 1
    assert not _running_in(suite)


# A depends-on-others victim whose failure quotes what one earlier test's source writes.
HINTED = {
    "conftest.py": SLOW_START,
    "pytest.ini": "[pytest]\n",
    "state.py": "REGISTRY = {}\n",
    "test_a.py": """
        import state


        def test_registers():
            state.REGISTRY["scale"] = 2
        """,
    "test_b.py": """
        import state


        def test_uses_registered():
            assert state.REGISTRY["scale"] == 2
        """,
    "test_c.py": """
        def test_c():
            pass
        """,
}


@pytest.mark.slow
def test_a_likely_provider_named_by_a_hint_gets_its_runs_started_not_the_collected_ones(
    tmp_path: Path,
) -> None:
    """Its failure (KeyError: 'scale') names what test_a.py's test writes: the hint's run
    and its confirmation start ahead, not the run with every other file collected, which
    the hint makes unneeded."""
    suite, out, _ = checked(tmp_path, HINTED, "--workers", "2", "--modes", "suite,parallel")
    verdict, evidence = read_json(out / "verdict.json"), read_json(out / EVIDENCE)
    victim = next(t for t in verdict["tests"] if t["id"] == "test_b.py::test_uses_registered")
    assert victim["category"] == "depends-on-others"
    assert victim["providers"] == ["test_a.py::test_registers"]
    assert _started_collecting(out, "test_c.py::test_c") == []
    assert evidence["concurrency"]["ahead_taken"] >= evidence["runs"], evidence["concurrency"]
    assert not _running_in(suite)


def _started_collecting(out: Path, test_id: str) -> list[str]:
    """The evidence interpreters started ahead that collected `test_id` (its journal's
    first line, written once collected, lists what it collected)."""
    found = []
    for journal in sorted((out / "evidence" / "journal").glob("*.held-*.jsonl")):
        first = journal.read_text(encoding="utf-8").partition("\n")[0]
        if first and test_id in json.loads(first).get("ids", []):
            found.append(journal.name)
    return found


THREAD_UNSAFE = {
    "conftest.py": SLOW_START,
    "pytest.ini": "[pytest]\n",
    "test_t.py": """
        import time

        SEEN = []


        def test_shared_list():
            SEEN.append(1)
            time.sleep(0.2)  # every thread appends before any asserts
            try:
                assert len(SEEN) == 1
            finally:
                SEEN.clear()
        """,
}


@pytest.mark.slow
@needs_run_parallel
def test_the_first_run_in_threads_starts_while_the_runs_before_it_go_on(tmp_path: Path) -> None:
    """A thread-unsafe test's run alone in threads: its interpreter starts ahead, with the
    threads' option, before its turn (before, only the second's did, and the first paid its
    start-up while the GPU idled)."""
    modes = ("--modes", "suite,parallel,threads")
    suite, out, _ = checked(tmp_path, THREAD_UNSAFE, "--workers", "2", *modes)
    verdict, evidence = read_json(out / "verdict.json"), read_json(out / EVIDENCE)
    unsafe = next(t for t in verdict["tests"] if t["id"] == "test_t.py::test_shared_list")
    assert unsafe["category"] == "thread-unsafe"
    assert evidence["phases"]["threads"]["runs"] >= 1, evidence["phases"]
    assert evidence["concurrency"]["ahead_taken"] >= evidence["runs"], evidence["concurrency"]
    assert not _running_in(suite)


@pytest.mark.slow
def test_the_evidences_first_runs_start_while_the_isolated_pass_runs(tmp_path: Path) -> None:
    """The screens name the depends-on-others victim: its first runs start as they end,
    while the lazy isolated pass runs, and the evidence takes them (before: its first
    alone-run started cold, its start-up paid while the GPU idled)."""
    modes = ("--modes", "suite,parallel,isolated")  # isolated after parallel: lazily
    suite, out, _ = checked(tmp_path, PROVIDED, "--workers", "4", *modes)
    verdict, evidence = read_json(out / "verdict.json"), read_json(out / EVIDENCE)
    victim = next(t for t in verdict["tests"] if t["id"] == "test_b.py::test_b_needs_a_provider")
    assert victim["category"] == "depends-on-others"
    assert victim["providers"] == ["test_a.py"]
    concurrency = evidence["concurrency"]
    assert concurrency.get("ahead_early", 0) >= 1, concurrency
    assert concurrency["ahead_taken"] >= evidence["runs"], concurrency
    assert not _running_in(suite)


def test_the_evidences_first_runs_include_a_test_that_failed_in_every_screen() -> None:
    # gpu_polluted's first hog ran out of device memory in every screen and passed in
    # isolated: the evidence's first run, which started cold (3 s) where only the screens'
    # isolation suspects were started early
    hog, broken = "test_hog.py::test_hold_most_memory", "test_x.py::test_off_by_one"
    oom = "OutOfMemoryError: out of memory allocating 55,834,574,848 bytes"
    failing = (
        TestResult(id=hog, file="test_hog.py", outcome=Outcome.FAILED, message=oom),
        TestResult(id=broken, file="test_x.py", outcome=Outcome.FAILED, message="assert 3 == 4"),
    )
    screens = {}
    for mode in (Mode.SUITE, Mode.PARALLEL):
        run = ModeRun(mode=mode, command=("gpuci",), rootdir="/x", workers=2, tests=failing)
        screens[mode] = ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)
    assert first_alone_runs(screens, {hog: 2, broken: 2}) == [hog, broken]
    # once the evidence begins, the consistent failures' first one waits on at most: each
    # starts the next as it runs, and idle they would keep the room a later run needs
    assert first_alone_runs(screens, {hog: 2, broken: 2}, then=1) == [hog]
