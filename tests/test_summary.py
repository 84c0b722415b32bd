"""Tests of gpuci/report/summary.py with roots: each told once, its victims beneath it.

The summary of a verdict without roots is tested in tests/test_diff.py.
"""

from __future__ import annotations

import io
import re
from dataclasses import replace
from pathlib import Path

from gpuci.formats import read_verdict
from gpuci.model import Category, Root, TestVerdict, Verdict
from gpuci.report.summary import MAX_LISTED, MAX_VICTIMS, MESSAGE_CHARS, format_summary
from gpuci.terminal import Terminal

VERDICT_ROOTS = Path(__file__).parent / "data" / "report" / "verdict_roots.json"
OOB = "tests/gpu/test_oob.py::test_scatter_oob"
CD = "cd /builds/team/project && CUDA_VISIBLE_DEVICES=0 python -m pytest"
EVIDENCE = "isolated=passed parallel=passed suite=failed reruns=passed,passed"


def test_a_root_is_printed_once_with_its_victims_beneath() -> None:
    lines = format_summary(read_verdict(VERDICT_ROOTS)).splitlines()
    assert lines[0] == (
        "categories: 16 passed, 1 failed, 11 order-dependent, 2 depends-on-others,"
        " 1 concurrency, 1 crashed"
    )
    assert lines[1:11] == [
        f"order-dependent   new   {OOB} broke 5 later tests",
        f"      new tests/gpu/test_oob.py::test_after_oob  {EVIDENCE}",
        f"      new tests/gpu/test_oob.py::test_sum  {EVIDENCE}",
        f"      new tests/gpu/test_reduce.py::test_mean  {EVIDENCE}",
        f"      new tests/gpu/test_reduce.py::test_max[fp16]  {EVIDENCE}",
        f"      new tests/gpu/test_softmax.py::test_rows[fp32]  {EVIDENCE}",
        f"    compute-sanitizer ({OOB}): Invalid __global__ write of size 4 bytes",
        # the victims failed alike (one fingerprint): their failure is told once
        "    failure: CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS (sticky: the context is lost)",
        f"    reproduce: {CD} {OOB} tests/gpu/test_oob.py::test_after_oob",
        "depends-on-others new   2 tests pass only after"
        " tests/gpu/test_compile.py::test_compile_softmax",
    ]
    text = "\n".join(lines)
    # Each victim once, under its root: not again as a finding of its own.
    findings = [line.split()[2] for line in lines[1:-2] if not line.startswith(" ")]
    victims = [line.split()[1] for line in lines if line.startswith(("      new ", "      known "))]
    assert len(victims) == 10 and "tests/gpu/test_pool.py::test_pad_to_multiple" in victims
    assert "tests/gpu/test_pool.py::test_reads_pool" in findings
    assert not set(victims) & set(findings)
    assert "1 test fails beside tests/gpu/test_hog_infer.py" in text
    assert (
        "order-dependent   known tests/gpu/test_pool.py::test_fill_and_release"
        " broke 1 later test" in lines
    )
    assert lines[-1] == (
        "verdict: fail (12 new isolation regressions; 1 failed test; 1 crashed test)"
    )
    assert lines[-2] == "evidence: 31 run(s) in 64.5s of a 120s budget"


def test_a_diagnosed_victim_is_its_own_finding_and_blames_nobody() -> None:
    lines = format_summary(read_verdict(VERDICT_ROOTS)).splitlines()
    at = next(i for i, line in enumerate(lines) if "::test_reads_pool  " in line)
    assert lines[at].startswith("order-dependent   new   tests/gpu/test_pool.py::test_reads_pool")
    assert lines[at + 1] == (
        "    reads uninitialized device memory (fails alone with poisoned allocations)"
    )
    assert not [line for line in lines if "broke" in line and "test_early" in line]


def test_findings_without_a_culprit_say_why_and_show_the_sanitizer() -> None:
    lines = format_summary(read_verdict(VERDICT_ROOTS)).splitlines()
    at = next(i for i, line in enumerate(lines) if "::test_unsearched  " in line)
    assert lines[at + 1] == "    culprit: not searched (budget)"
    at = next(i for i, line in enumerate(lines) if "::test_illegal_access  " in line)
    assert lines[at].startswith("crashed ")
    assert lines[at + 1] == "    compute-sanitizer: Invalid __shared__ read of size 8 bytes"


def _cascade(victims: int, evil: str = "") -> Verdict:
    culprit = f"tests/test_a.py::test_oob{evil}"
    tests = tuple(
        TestVerdict(
            id=f"tests/test_b.py::test_{i:02d}{evil}",
            file="tests/test_b.py",
            category=Category.ORDER_DEPENDENT,
            outcomes={"suite": "failed"},
            culprits=(culprit,),
            reproduce=f"pytest {culprit} tests/test_b.py::test_{i:02d}{evil}",
        )
        for i in range(victims)
    )
    root = Root(
        culprits=(culprit,),
        category=Category.ORDER_DEPENDENT,
        victims=tuple(t.id for t in tests),
        reproduce=tests[0].reproduce,
    )
    return Verdict(verdict="fail", tests=tests, roots=(root,))


def test_a_root_lists_a_few_victims_and_counts_the_rest() -> None:
    lines = format_summary(_cascade(MAX_VICTIMS + 4)).splitlines()
    assert lines[1] == (
        f"order-dependent         tests/test_a.py::test_oob broke {MAX_VICTIMS + 4} later tests"
    )
    assert lines[2] == "      tests/test_b.py::test_00  suite=failed"
    assert lines[2 + MAX_VICTIMS] == "      ... and 4 more victims (-v lists all)"
    assert lines[3 + MAX_VICTIMS] == (
        "    reproduce: pytest tests/test_a.py::test_oob tests/test_b.py::test_00"
    )
    assert len(lines) == 1 + 1 + MAX_VICTIMS + 1 + 1 + 1


def test_roots_count_towards_the_listing_cap() -> None:
    verdict = _cascade(2)
    roots = tuple(replace(verdict.roots[0], culprits=(f"c{i}",)) for i in range(MAX_LISTED + 2))
    lines = format_summary(replace(verdict, roots=roots)).splitlines()
    assert lines[-2] == "... and 2 more (see verdict.json; -v lists all)"
    assert sum(1 for line in lines if " broke 2 later tests" in line) == MAX_LISTED


def test_untrusted_culprit_ids_cannot_rewrite_the_terminal() -> None:
    text = format_summary(_cascade(1, evil="[\x1b[2J\x1b]0;t\x07\r\nfake\u202e]"))
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text
    assert "tests/test_a.py::test_oob[??fake?] broke 1 later test" in text
    assert len(text.splitlines()) == 5


# Its file failed alike in every screen, so isolated never re-ran it and took parallel's
# failure: beside two passing alone-runs, `isolated=failed` would read as a contradiction.
COPIED = TestVerdict(
    id="t/test_pool.py::test_victim",
    file="t/test_pool.py",
    category=Category.ORDER_DEPENDENT,
    outcomes={"isolated": "failed", "parallel": "failed", "suite": "failed"},
    reruns=("passed", "passed"),
    inferred=("isolated",),
    message="OutOfMemoryError: pool limit is 1048576 bytes\nsecond line",
    reproduce="python -m pytest t/test_pool.py::test_victim",
)


def test_a_failure_a_mode_copied_without_running_the_test_is_not_shown_as_its_outcome() -> None:
    verdict = Verdict(verdict="fail", summary={"order-dependent": 1}, tests=(COPIED,))
    lines = format_summary(verdict).splitlines()
    assert lines[1].endswith(
        "t/test_pool.py::test_victim  parallel=failed suite=failed reruns=passed,passed"
        " (isolated not re-run for it: its file failed alike in every screen)"
    )
    assert "isolated=failed" not in "\n".join(lines)
    # a pass a mode took from a fresh interpreter of the same file stands as the mode's
    passed = replace(COPIED, outcomes={**COPIED.outcomes, "isolated": "passed"})
    text = format_summary(replace(verdict, tests=(passed,)))
    assert "isolated=passed parallel=failed" in text


def test_each_finding_says_its_failure_first_line_bounded() -> None:
    long = replace(COPIED, message="E" * 1000)
    for test, said in ((COPIED, "OutOfMemoryError: pool limit is 1048576 bytes"), (long, "")):
        verdict = Verdict(verdict="fail", summary={"order-dependent": 1}, tests=(test,))
        (line,) = [s for s in format_summary(verdict).splitlines() if "failure:" in s]
        if said:
            assert line == f"    failure: {said}"
        else:
            assert line == "    failure: " + "E" * (MESSAGE_CHARS - 1) + "…"


def test_a_finding_says_each_modes_outcome_in_pytests_words() -> None:
    test = TestVerdict(
        id="tests/test_x.py::test_y",
        file="tests/test_x.py",
        category=Category.FAILED,
        outcomes={"parallel": "failed", "suite": "failed"},
        pytest={"parallel": ("error",), "suite": ("passed", "error")},
        message="error in teardown: RuntimeError: boom",
    )
    modes = {"suite": {"counts": "1 passed, 1 error"}}
    verdict = Verdict(verdict="fail", summary={"failed": 1}, tests=(test,), modes=modes)
    lines = format_summary(verdict).splitlines()
    assert lines[:2] == ["pytest (suite): 1 passed, 1 error", "categories: 1 failed"]
    assert "tests/test_x.py::test_y  parallel=error suite=passed+error" in lines[2], lines


def test_quiet_tells_each_finding_by_its_headline_alone() -> None:
    verdict = read_verdict(VERDICT_ROOTS)
    full = format_summary(verdict).splitlines()
    quiet = format_summary(verdict, Terminal(verbosity=-1, color="no")).splitlines()
    headlines = [line for line in full if not line.startswith(" ")]
    # every finding's first line, the counts, the modes and the verdict: no victim, no
    # failure, no command, no evidence line
    assert quiet == [line for line in headlines if not line.startswith("evidence: ")]
    assert quiet[0] == full[0] and quiet[-1] == full[-1]
    assert f"order-dependent   new   {OOB} broke 5 later tests" in quiet


def test_verbose_cuts_neither_victims_nor_findings() -> None:
    many = _cascade(MAX_VICTIMS + 4)
    lines = format_summary(many, Terminal(verbosity=1, color="no")).splitlines()
    assert [line for line in lines if "::test_" in line and "suite=failed" in line] == [
        f"      tests/test_b.py::test_{n:02d}  suite=failed" for n in range(MAX_VICTIMS + 4)
    ]
    assert not any("more victims" in line for line in lines)
    roots = tuple(replace(many.roots[0], culprits=(f"c{i}",)) for i in range(MAX_LISTED + 2))
    lines = format_summary(replace(many, roots=roots), Terminal(verbosity=1)).splitlines()
    assert sum(1 for line in lines if " broke 14 later tests" in line) == MAX_LISTED + 2
    assert not any(line.startswith("... and") for line in lines)


def test_colour_paints_the_categories_and_the_verdict_and_nothing_else() -> None:
    verdict = read_verdict(VERDICT_ROOTS)
    plain = format_summary(verdict, Terminal(color="no"))
    painted = format_summary(verdict, Terminal(color="yes"))
    assert "\x1b" not in plain
    assert re.sub(r"\x1b\[[0-9;]*m", "", painted) == plain  # the same words, coloured
    lines = painted.splitlines()
    assert lines[1].startswith("\x1b[31morder-dependent  \x1b[0m new ")
    assert (
        lines[-1] == "verdict: \x1b[31mfail\x1b[0m" + plain.splitlines()[-1][len("verdict: fail") :]
    )
    passed = format_summary(Verdict(verdict="pass"), Terminal(color="yes"))
    assert passed.splitlines()[-1] == "verdict: \x1b[32mpass\x1b[0m"
    # auto: as pytest decides for the summary's stream, here a pipe (a StringIO: no tty)
    assert "\x1b" not in format_summary(verdict, Terminal(color="auto"), io.StringIO())


def test_untrusted_text_cannot_carry_colour_into_a_coloured_summary() -> None:
    text = format_summary(_cascade(1, evil="\x1b[32mgreen"), Terminal(color="yes"))
    assert "\x1b[32mgreen" not in text and "?[32mgreen" not in text
