"""Fingerprints: what varies between identical failures is normalized; bad input stays
bounded and printable; groups pick representatives spread over their files."""

from __future__ import annotations

import dataclasses

from gpuci.evidence.fingerprints import (
    MAX_FINGERPRINT,
    REPRESENTATIVES,
    consistent_failures,
    failure_kind,
    files_failing_alike,
    fingerprint,
    group_failures,
    same_kind,
    spread,
)
from gpuci.model import Mode, ModeRun, Outcome, TestResult
from gpuci.run.proc.endings import EXIT_ID


def _failed(
    test_id: str, message: str, where: str = "", outcome: Outcome = Outcome.FAILED
) -> TestResult:
    return TestResult(
        id=test_id, file=test_id.partition("::")[0], outcome=outcome, message=message, where=where
    )


def test_numbers_addresses_paths_and_parameter_ids_are_normalized() -> None:
    one = fingerprint(
        "t.py::test_x[float16-large]",
        "ValueError: float16 large 42 at 0xDEADbeef in /tmp/pytest-of-ci/pytest-7/x0/data.bin",
        "helpers.py:12",
    )
    two = fingerprint(
        "t.py::test_x[int8-small]",
        "ValueError: int8 small 7 at 0x1 in /tmp/pytest-of-ci/pytest-9/x3/data.bin",
        "helpers.py:12",
    )
    assert one == two == "ValueError: <param> <param> N at <hex> in <tmp> @ helpers.py:12"


def test_another_frame_or_exception_is_another_fingerprint() -> None:
    base = fingerprint("t.py::a", "ValueError: bad", "helpers.py:12")
    assert fingerprint("t.py::a", "ValueError: bad", "helpers.py:13") != base
    assert fingerprint("t.py::a", "TypeError: bad", "helpers.py:12") != base


def test_a_message_of_megabytes_or_bad_bytes_stays_bounded_and_printable() -> None:
    huge = "E: " + "x" * 5_000_000
    assert len(fingerprint("t.py::a", huge, "h.py:1" * 1_000_000)) <= MAX_FINGERPRINT
    hostile = "Error: \udcff\ud800 \x1b[31mred\x1b[0m \u202egnp.exe \x00\x07 \ufffd"
    text = fingerprint("t.py::a", hostile, "h\x1b]8;;x\x07.py:1")
    assert text.isprintable()
    text.encode("utf-8")  # no lone surrogate left: it prints and serializes
    assert "\x1b" not in text and "\u202e" not in text


def test_only_failures_alike_in_every_mode_are_consistent() -> None:
    results = {
        Mode.ISOLATED: [_failed("a.py::same", "E"), _failed("a.py::differs", "E")],
        Mode.SUITE: [
            _failed("a.py::same", "E"),
            TestResult(id="a.py::differs", file="a.py", outcome=Outcome.PASSED),
        ],
    }
    found = consistent_failures(results, ["a.py::same", "a.py::differs"])
    assert list(found) == ["a.py::same"]


def test_a_group_takes_representatives_over_its_files() -> None:
    members = [_failed(f"a.py::t[{i}]", f"E: case {i}", "h.py:1") for i in range(10)]
    members += [_failed(f"b.py::t[{i}]", f"E: case {i}", "h.py:1") for i in range(10)]
    (group,) = group_failures({t.id: t for t in members})
    assert len(group.members) == 20
    assert len(group.representatives) == REPRESENTATIVES
    assert {r.partition("::")[0] for r in group.representatives} == {"a.py", "b.py"}
    assert spread(members[:2], 5) == ("a.py::t[0]", "a.py::t[1]")


def test_two_sides_of_one_contention_fail_the_same_way_whatever_each_names() -> None:
    # the driver's list of holders, each test's own line, and an assertion that counts the
    # steps it lost all differ; the failure is one
    weights = _failed(
        "a.py::test_a",
        "fakegpu.OutOfMemoryError: out of device memory allocating 410 MiB: 819 MiB of"
        " 1024 MiB in use (PID 7: 410 MiB, PID 8: 410 MiB)",
        "fakegpu.py:181",
    )
    steps = _failed(
        "b.py::test_b",
        "AssertionError: 9/10 steps: out of device memory allocating 358 MiB: 819 MiB of"
        " 1024 MiB in use (PID 7: 410 MiB)",
        "b.py:42",
    )
    assert same_kind(failure_kind([weights]), failure_kind([steps]))
    # a kind this short says too little to tell one failure: it matches nothing, itself neither
    small = failure_kind([_failed("c.py::test_c", "AssertionError: assert 3 == 4")])
    assert not same_kind(small, small)
    assert not same_kind(
        failure_kind([weights]), failure_kind([_failed("d.py::t", "KeyError: 'x'")])
    )
    assert failure_kind([_failed("e.py::t", "", outcome=Outcome.CRASHED)]) == ""


def _screen(mode: Mode, *tests: TestResult) -> ModeRun:
    return ModeRun(mode=mode, command=("gpuci",), rootdir="/x", workers=2, tests=tests)


def test_a_file_is_alike_only_where_each_failure_is_the_same_in_every_screen() -> None:
    ok = TestResult(id="a.py::test_ok", file="a.py", outcome=Outcome.PASSED)
    broken = [_failed("a.py::test_x", "ValueError: bad 1"), _failed("a.py::test_y", "KeyError: 2")]
    again = [_failed("a.py::test_x", "ValueError: bad 7"), _failed("a.py::test_y", "KeyError: 9")]
    suite, parallel = _screen(Mode.SUITE, ok, *broken), _screen(Mode.PARALLEL, ok, *again)
    # two failures of their own, each the same way in both screens (numbers aside)
    assert files_failing_alike([suite, parallel]) == {"a.py"}
    differs = _screen(Mode.PARALLEL, ok, again[0], _failed("a.py::test_y", "KeyError: other"))
    assert files_failing_alike([suite, differs]) == set()
    passed = _screen(Mode.PARALLEL, ok, again[0], dataclasses.replace(ok, id="a.py::test_y"))
    assert files_failing_alike([suite, passed]) == set()
    crashed = _failed("a.py::test_y", "Fatal Python error", outcome=Outcome.CRASHED)
    assert files_failing_alike([suite, _screen(Mode.PARALLEL, ok, again[0], crashed)]) == set()
    missing = _screen(Mode.PARALLEL, ok, again[0])  # a screen that did not run test_y
    assert files_failing_alike([suite, missing]) == set()
    # a pseudo test for a dead interpreter has no alone-run to decide it
    dead = _failed(f"a.py::{EXIT_ID}", "exit code 3")
    assert files_failing_alike([_screen(Mode.SUITE, dead), _screen(Mode.PARALLEL, dead)]) == set()
