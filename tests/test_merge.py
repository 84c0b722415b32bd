"""Tests of gpuci.verdict.merge: JUnit files of files, shards and modes merged into one.

The inputs under tests/data/merge/out/ are JUnit files written by pytest itself (a small
suite run per file and whole), laid out as `gpuci run` lays out a result directory:

    isolated/junit.xml + isolated/junit/tests/*.py.xml   (the per-file ones repeat it)
    parallel/shard-1-of-2/junit.xml + junit/...           (sharded: no parallel/junit.xml)
    parallel/shard-2-of-2/junit/tests/test_beta.py.xml    (this shard never merged its own)
    suite/junit.xml

tests/data/merge/expected/ holds the merged outputs, reviewed by hand.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import pytest

from gpuci.model import InputError, Mode, UsageError
from gpuci.verdict.merge import find_junit_inputs, merge_junit

DATA = Path(__file__).parent / "data" / "merge"
OUT = DATA / "out"
EXPECTED = DATA / "expected"
REPO = Path(__file__).parent.parent


def root_of(path: Path) -> ElementTree.Element:
    return ElementTree.parse(path).getroot()  # noqa: S314 -- our own fixtures and outputs


def cases(path: Path) -> list[ElementTree.Element]:
    return list(root_of(path).iter("testcase"))


def test_result_directory_matches_golden_file(tmp_path: Path) -> None:
    output = tmp_path / "merged.xml"
    merge_junit([OUT], output)
    assert output.read_bytes() == (EXPECTED / "out.xml").read_bytes()


def test_per_file_folder_of_one_mode_matches_golden_file(tmp_path: Path) -> None:
    output = tmp_path / "merged.xml"
    merge_junit([OUT / "isolated" / "junit"], output)
    assert output.read_bytes() == (EXPECTED / "isolated-files.xml").read_bytes()


def test_each_test_is_counted_once_and_counts_are_recomputed(tmp_path: Path) -> None:
    output = tmp_path / "merged.xml"
    summary = merge_junit([OUT], output)
    # isolated/junit.xml stands for isolated/junit/*; shard 2 has only its per-file file.
    used = [
        OUT / "isolated" / "junit.xml",
        OUT / "parallel" / "shard-1-of-2" / "junit.xml",
        OUT / "parallel" / "shard-2-of-2" / "junit" / "tests" / "test_beta.py.xml",
        OUT / "suite" / "junit.xml",
    ]
    assert [i.path for i in find_junit_inputs([OUT])] == used
    inputs = [c for path in used for c in cases(path)]
    merged = cases(output)
    assert summary.files == 4
    assert summary.suites == 4
    assert summary.tests == len(merged) == len(inputs) == 24
    assert summary.failures == sum(c.find("failure") is not None for c in inputs) == 3
    assert summary.errors == sum(c.find("error") is not None for c in inputs) == 3
    assert summary.skipped == sum(c.find("skipped") is not None for c in inputs) == 6
    assert summary.modes == (Mode.ISOLATED, Mode.PARALLEL, Mode.SUITE)
    root = root_of(output)
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == (
        "24",
        "3",
        "3",
        "6",
    )
    for suite in root.iter("testsuite"):
        assert int(suite.get("tests") or -1) == len(list(suite.iter("testcase")))


def test_names_are_unique_for_gitlab_when_modes_are_mixed(tmp_path: Path) -> None:
    output = tmp_path / "merged.xml"
    merge_junit([OUT], output)
    names = Counter((c.get("classname"), c.get("name") or "") for c in cases(output))
    assert names.most_common(1)[0][1] == 1
    assert {n.split("] ")[0] + "]" for _, n in names} == {"[isolated]", "[parallel]", "[suite]"}
    suites = [s.get("name") for s in root_of(output).iter("testsuite")]
    assert len(set(suites)) == len(suites)


def test_one_mode_gets_no_prefix(tmp_path: Path) -> None:
    output = tmp_path / "merged.xml"
    merge_junit([OUT / "parallel"], output)
    names = [c.get("name") for c in cases(output)]
    assert len(names) == 8
    assert not [n for n in names if n and n.startswith("[")]


def test_files_named_directly_keep_their_own_suites(tmp_path: Path) -> None:
    output = tmp_path / "merged.xml"
    alpha = OUT / "isolated" / "junit" / "tests" / "test_alpha.py.xml"
    summary = merge_junit([alpha, alpha, OUT / "suite" / "junit.xml"], output)
    assert summary.files == 2  # the same file twice counts once
    root = root_of(output)
    suites = [s.get("name") for s in root.iter("testsuite")]
    assert suites == [str(alpha.with_suffix("")), str(OUT / "suite")]
    assert [c.get("name") for c in root.iter("testcase")][:2] == [
        "[isolated] test_ok",
        "[isolated] test_fails",
    ]


def test_equal_suite_names_are_not_merged_into_one(tmp_path: Path) -> None:
    # pytest names every suite "pytest", and junitparser merges suites that compare equal.
    for name in ("a", "b"):
        (tmp_path / "in").mkdir(exist_ok=True)
        shutil.copy(OUT / "suite" / "junit.xml", tmp_path / "in" / f"{name}.xml")
    output = tmp_path / "merged.xml"
    summary = merge_junit([tmp_path / "in"], output)
    suites = [s.get("name") for s in root_of(output).iter("testsuite")]
    assert suites == ["a", "b"]
    assert summary.suites == 2
    assert summary.tests == 16


def test_merging_again_does_not_prefix_twice(tmp_path: Path) -> None:
    first = tmp_path / "parallel" / "merged.xml"  # lies in a mode-named folder on purpose
    merge_junit([OUT], first)
    output = tmp_path / "again.xml"
    merge_junit([first, OUT / "isolated" / "junit.xml"], output)
    names = [c.get("name") or "" for c in cases(output)]
    assert len(names) == 32
    assert not [n for n in names if n.count("[") > 1 and "] [" in n]
    assert sum(n.startswith("[suite] ") for n in names) == 8


def test_output_inside_the_inputs_is_not_read_back(tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(OUT, out)
    first = merge_junit([out], out / "junit.xml")
    second = merge_junit([out], out / "junit.xml")
    assert first == second
    assert first.tests == 24
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_mode_level_junit_stands_for_its_shards(tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(OUT, out)
    shutil.copy(out / "suite" / "junit.xml", out / "parallel" / "junit.xml")
    found = find_junit_inputs([out / "parallel"])
    assert [i.path for i in found] == [out / "parallel" / "junit.xml"]
    assert found[0].mode is Mode.PARALLEL


def test_missing_mode_junit_falls_back_to_per_file_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(OUT, out)
    (out / "isolated" / "junit.xml").unlink()
    (out / "isolated" / "junit" / "tests" / ".test_alpha.py.xml.tmp123.xml").write_text("<")
    found = find_junit_inputs([out / "isolated"])
    assert [i.label for i in found] == ["junit/tests/test_alpha.py", "junit/tests/test_beta.py"]


def test_shards_sort_by_number(tmp_path: Path) -> None:
    for index in (1, 2, 10, 9):
        shard = tmp_path / "suite" / f"shard-{index}-of-10"
        shard.mkdir(parents=True)
        shutil.copy(OUT / "suite" / "junit.xml", shard / "junit.xml")
    labels = [i.label for i in find_junit_inputs([tmp_path])]
    assert labels == [f"suite/shard-{i}-of-10" for i in (1, 2, 9, 10)]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("truncated.xml", "not well-formed XML"),
        ("coverage.xml", "not a JUnit XML file"),
    ],
)
def test_malformed_input_names_the_file_and_leaves_output_alone(
    tmp_path: Path, bad: str, says: str
) -> None:
    output = tmp_path / "merged.xml"
    output.write_text("earlier result\n")
    with pytest.raises(InputError, match=says) as caught:
        merge_junit([OUT / "suite" / "junit.xml", DATA / "bad" / bad], output)
    assert str(DATA / "bad" / bad) in str(caught.value)
    assert output.read_text() == "earlier result\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merged.xml"]


def test_malformed_input_through_the_command_line(tmp_path: Path) -> None:
    output = tmp_path / "merged.xml"
    output.write_text("earlier result\n")
    bad = DATA / "bad" / "truncated.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "gpuci", "merge", str(OUT), str(bad), "-o", str(output)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 3
    assert f"gpuci: error: {bad}: not well-formed XML" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert output.read_text() == "earlier result\n"


def test_nothing_to_merge_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no JUnit XML files found"):
        merge_junit([tmp_path / "empty"], tmp_path / "merged.xml")
    with pytest.raises(UsageError, match="no inputs"):
        merge_junit([], tmp_path / "merged.xml")
    with pytest.raises(InputError, match="no such file"):
        merge_junit([tmp_path / "absent"], tmp_path / "merged.xml")
    with pytest.raises(UsageError, match="is a directory"):
        merge_junit([OUT], tmp_path / "empty")
    assert not (tmp_path / "merged.xml").exists()


def test_entities_cannot_pull_local_files_into_the_output(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN-1234")
    sneaky = tmp_path / "in" / "sneaky.xml"
    sneaky.parent.mkdir()
    sneaky.write_text(
        f'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file://{secret}">]>'
        '<testsuites><testsuite name="pytest"><testcase classname="t" name="x">'
        "<failure>&e;</failure></testcase></testsuite></testsuites>"
    )
    output = tmp_path / "merged.xml"
    try:
        merge_junit([sneaky], output)
    except InputError as exc:
        assert str(sneaky) in str(exc)
    else:
        assert "TOKEN-1234" not in output.read_text()
