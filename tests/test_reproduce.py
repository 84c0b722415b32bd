"""The printed commands: relative to where gpuci ran, and naming a file where that runs
the same tests as its ids (`gpuci.evidence.reproduce`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gpuci.evidence.reproduce import in_rootdir, pytest_command, whole_files
from gpuci.model import Mode, ModeRun, Outcome, TestResult

VICTIMS = [f"tests/test_many.py::test_v[{n}]" for n in range(61)]
POLLUTER = "tests/test_pool.py::test_fill_and_release"


def run_of(ids: Sequence[str], *, rootdir: str = "/builds/team/p", workdir: str = "") -> ModeRun:
    tests = tuple(TestResult(id=i, file=i.partition("::")[0], outcome=Outcome.PASSED) for i in ids)
    return ModeRun(
        mode=Mode.SUITE,
        command=("gpuci",),
        rootdir=rootdir,
        workdir=workdir,
        workers=1,
        tests=tests,
    )


def test_every_test_of_a_file_in_its_order_is_the_file() -> None:
    run = run_of([POLLUTER, "tests/test_pool.py::test_other", *VICTIMS])
    assert whole_files(run, [POLLUTER, *VICTIMS]) == [POLLUTER, "tests/test_many.py"]
    command = pytest_command(run, [POLLUTER, *VICTIMS], None)
    assert command.endswith(f"python -m pytest {POLLUTER} tests/test_many.py")
    assert len(command) < 200


def test_ids_stay_where_the_file_would_run_other_tests_or_another_order() -> None:
    run = run_of([POLLUTER, *VICTIMS])
    # one left out, one order changed, one id named twice: naming the file would differ
    for targets in (
        VICTIMS[1:],
        [VICTIMS[1], VICTIMS[0], *VICTIMS[2:]],
        [*VICTIMS, VICTIMS[0]],
    ):
        assert whole_files(run, targets) == targets
    # the file's tests around another file's: naming the file would run them all at once
    split = [*VICTIMS[:30], POLLUTER, *VICTIMS[30:]]
    assert whole_files(run, split) == split
    # a culprit in its victims' own file: the whole file in its order is the file; a test
    # named twice stays (naming the file would run it once)
    own = run_of(
        ["tests/test_a.py::test_polluter", "tests/test_a.py::test_v1", "tests/test_a.py::test_v2"]
    )
    targets = [
        "tests/test_a.py::test_polluter",
        "tests/test_a.py::test_v1",
        "tests/test_a.py::test_v2",
    ]
    assert whole_files(own, targets[:1] + targets[1:]) == ["tests/test_a.py"]
    assert whole_files(own, [targets[0], *targets]) == [targets[0], *targets]


def test_ids_stay_where_a_plugin_may_have_reordered_the_file() -> None:
    # the screens ran the file in pytest-randomly's order; the command turns it off
    run = run_of([POLLUTER, *VICTIMS])
    shuffled = dataclasses.replace(run, environment={"pytest-randomly": "3.16.0"})
    assert whole_files(shuffled, [POLLUTER, *VICTIMS]) == [POLLUTER, *VICTIMS]


def test_one_test_keeps_its_id() -> None:
    run = run_of(["tests/test_one.py::test_only"])
    assert whole_files(run, ["tests/test_one.py::test_only"]) == ["tests/test_one.py::test_only"]


def test_commands_are_relative_to_where_gpuci_ran() -> None:
    command = "python -m pytest t.py"
    # a CI job runs gpuci in the project's root, which is pytest's rootdir
    assert in_rootdir(run_of([], workdir="/builds/team/p"), command) == command
    # the rootdir below it (a pyproject.toml in python/)
    below = run_of([], rootdir="/builds/team/p/python", workdir="/builds/team/p")
    assert in_rootdir(below, command) == f"cd python && {command}"
    # elsewhere, or a run.json from before gpuci recorded where it ran: as it was
    elsewhere = run_of([], rootdir="/srv/suite", workdir="/builds/team/p")
    assert in_rootdir(elsewhere, command) == f"cd /srv/suite && {command}"
    assert in_rootdir(run_of([]), command) == f"cd /builds/team/p && {command}"
