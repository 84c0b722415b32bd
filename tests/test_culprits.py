"""End-to-end: `gpuci check` and `gpuci explain` name who broke whom (the culprit search).

The suite, built in tmp_path, is pure Python; its polluters stand in for GPU state:
- a module-level flag that fails every later test in the interpreter (a sticky CUDA error),
  set by one polluter, with five victims over three files;
- a pool-style polluter that leaves stale data two files ahead of its victim, with clean
  files between;
- a provider that registers what a later test needs (depends-on-others);
- a "memory hog" pair: each fails while the other runs beside it (concurrency).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import markupsafe
import pytest
from cli_runner import gpuci, python_word

STICKY = "test_a_sticky.py::test_a_polluter"
CASCADE = (
    "test_a_sticky.py::test_a_victim",
    "test_b_victims.py::test_b_first",
    "test_b_victims.py::test_b_second",
    "test_c_victims.py::test_c_first",
    "test_c_victims.py::test_c_second",
)
POOL = "test_d_pool.py::test_d_fill"
POOL_VICTIM = "test_g_reader.py::test_g_reads_fresh"
PROVIDER = "test_h_provider.py::test_h_register"
CONSUMER = "test_i_consumer.py::test_i_uses_registry"
HOGS = ("test_j_hog.py::test_j_hold", "test_k_hog.py::test_k_hold")
ROOT = Path(__file__).resolve().parent.parent

VICTIM = "def test_{name}():\n    assert not sticky.POISONED, 'the context is poisoned'\n"
# The example suite's hogs.py: two hogs fail exactly where their interpreters run them at
# once (they meet through files in HOG_DIR; the parallel screen's first two files, as the
# three small steps make these the files with the most tests, and each pair run); alone
# they pass at once.
HOG = """import hogs
import pytest


@hogs.hog("{name}")
def test_{name}_hold():
    assert not hogs.contend("{name}", partners=("{partner}",)), hogs.MESSAGE


@pytest.mark.parametrize("step", [1, 2, 3])
def test_{name}_small(step):
    pass
"""
CONFTEST = """import hogs


def pytest_collection_finish(session):
    hogs.announce(session.items)
"""
FILES = {
    "pytest.ini": "[pytest]\n",
    "conftest.py": CONFTEST,
    "hogs.py": (ROOT / "examples" / "polluted_suite" / "hogs.py").read_text(encoding="utf-8"),
    "sticky.py": "POISONED = False\n",
    "pool.py": "BLOCKS = []\n",
    "registry.py": "KERNELS = {}\n",
    "test_a_sticky.py": "import sticky\n\n\ndef test_a_fine():\n    pass\n\n\n"
    "def test_a_polluter():\n    sticky.POISONED = True\n\n\n" + VICTIM.format(name="a_victim"),
    "test_b_victims.py": "import sticky\n\n\n"
    + VICTIM.format(name="b_first")
    + "\n\n"
    + VICTIM.format(name="b_second"),
    "test_c_victims.py": "import sticky\n\n\n"
    + VICTIM.format(name="c_first")
    + "\n\n"
    + VICTIM.format(name="c_second"),
    "test_d_pool.py": "import pool\n\n\ndef test_d_fill():\n    pool.BLOCKS.append(7.0)\n",
    "test_e_clean.py": "def test_e_one():\n    pass\n\n\ndef test_e_two():\n    pass\n",
    "test_f_clean.py": "def test_f_one():\n    pass\n",
    "test_g_reader.py": "import pool\n\n\ndef test_g_reads_fresh():\n"
    "    assert pool.BLOCKS == [], 'stale data from the pool'\n",
    "test_h_provider.py": "import registry\n\n\ndef test_h_register():\n"
    "    registry.KERNELS['scale'] = 2\n",
    "test_i_consumer.py": "import registry\n\n\ndef test_i_uses_registry():\n"
    "    assert registry.KERNELS['scale'] == 2\n",
    "test_j_hog.py": HOG.format(name="j", partner="k"),
    "test_k_hog.py": HOG.format(name="k", partner="j"),
}


def build_suite(root: Path) -> Path:
    suite = root / "suite"
    suite.mkdir()
    for name, text in FILES.items():
        (suite / name).write_text(text, encoding="utf-8")
    (root / "hogs").mkdir()
    return suite


def environment(root: Path) -> dict[str, str]:
    # the reproduce commands say `python`: this interpreter, with gpuci's test dependencies
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    # the hogs' least hold decides nothing here (they meet through files, and no durations
    # order the files): short, so each hog's interpreter does not sleep 1.5 s
    return dict(os.environ, HOG_DIR=str(root / "hogs"), HOG_HOLD_S="0.2", PATH=path)


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any], str]:
    """One `gpuci check` of the suite: its OUT, the suite, the verdict and the output."""
    root = tmp_path_factory.mktemp("culprits")
    suite = build_suite(root)
    env = environment(root)
    out = root / "out"
    args = ("check", ".", "--out", str(out), "--workers", "2", "--evidence-budget", "600")
    proc = gpuci(*args, cwd=suite, env=env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    return out, suite, verdict, proc.stdout


def by_id(verdict: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["id"]: t for t in verdict["tests"]}


@pytest.mark.slow
def test_each_victim_names_its_culprit(checked: tuple[Path, Path, dict[str, Any], str]) -> None:
    _, _, verdict, _ = checked
    tests = by_id(verdict)
    for victim in CASCADE:
        assert tests[victim]["category"] == "order-dependent", tests[victim]
        assert tests[victim]["culprits"] == [STICKY], tests[victim]
    assert tests[POOL_VICTIM]["category"] == "order-dependent"
    assert tests[POOL_VICTIM]["culprits"] == [POOL]
    assert tests[CONSUMER]["category"] == "depends-on-others"
    assert tests[CONSUMER]["providers"] == [PROVIDER]
    assert tests[HOGS[0]]["category"] == "concurrency"
    # contention is symmetric: each names the other (its file, or its test in its pair)
    assert [c.partition("::")[0] for c in tests[HOGS[0]]["culprits"]] == ["test_k_hog.py"]
    assert tests[HOGS[1]]["category"] == "concurrency"
    assert [c.partition("::")[0] for c in tests[HOGS[1]]["culprits"]] == ["test_j_hog.py"]
    # the polluters pass themselves: the damage shows in someone else's test
    for polluter in (STICKY, POOL, PROVIDER):
        assert tests[polluter]["category"] == "passed"
        assert "culprits" not in tests[polluter]


@pytest.mark.slow
def test_every_card_and_the_note_carry_every_command_that_shows_it(
    checked: tuple[Path, Path, dict[str, Any], str],
) -> None:
    out, _, verdict, stdout = checked
    tests = by_id(verdict)
    consumer, victim = tests[CONSUMER], tests[POOL_VICTIM]
    assert "culprits" not in consumer  # a provider is not a culprit
    html = (out / "report.html").read_text(encoding="utf-8")
    note = (out / "comment.md").read_text(encoding="utf-8")
    # fails alone and passes after its provider; fails after its culprit and passes alone
    commands = {
        consumer["reproduce"]: "fails alone",
        consumer["with_provider"]: "passes after its provider",
        victim["reproduce"]: "fails after its culprit",
        victim["passes_alone"]: "passes alone",
    }
    assert victim["passes_alone"].endswith(f"python -m pytest {POOL_VICTIM}")
    # it waited with the sticky victims (an AssertionError too) and passed after the sticky
    # culprit in their group run: then its own search, a bisection
    assert victim["search"].startswith("bisection"), victim["search"]
    # the first waiting sticky victim tried the sticky culprit (an earlier victim's) first:
    # the card's table labels that run instead of showing it as a bisection's own
    assert tests[CASCADE[1]]["probes"][0]["kind"] == "cascade", tests[CASCADE[1]]["probes"]
    assert "an earlier victim&#39;s culprits:</span> <code>" + STICKY in html
    for command, what in commands.items():
        assert str(markupsafe.escape(command)) in html, what
        assert command in note, what
        assert f"    {what}: {command}" in stdout, what


@pytest.mark.slow
def test_the_headline_counts_root_causes_and_the_tests_they_touch(
    checked: tuple[Path, Path, dict[str, Any], str],
) -> None:
    out, _, verdict, stdout = checked
    # the sticky flag (5 victims) and the pool are polluters; the hogs are one contention
    headline = "4 isolation problems — 2 polluters, 1 provider, 1 contention — in 9 tests"
    assert verdict["reasons"][0] == headline
    assert f"verdict: fail ({headline}" in stdout
    for name in ("report.html", "comment.md"):
        assert headline in (out / name).read_text(encoding="utf-8"), name
    # in the note, our own words, not a code span
    assert f"`{headline}`" not in (out / "comment.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_cascade_is_one_root_with_five_victims(
    checked: tuple[Path, Path, dict[str, Any], str],
) -> None:
    _, _, verdict, stdout = checked
    roots = verdict["roots"]
    assert roots[0] == {
        "culprits": [STICKY],
        "category": "order-dependent",
        "victims": list(CASCADE),
        # the card's command is the group run: the culprit before every waiting victim
        "reproduce": by_id(verdict)[CASCADE[1]]["reproduce"],
    }
    # the two hogs fail beside each other: one contention, one root of both
    assert sorted(len(r["victims"]) for r in roots) == [1, 1, 2, 5]
    (pair,) = [r for r in roots if r["category"] == "concurrency"]
    assert sorted(pair["victims"]) == sorted(HOGS)
    # the first victim failed in its own file's interpreters (not waiting); the first of the
    # later ones took two cascade runs, and the group runs answered the others: one pair
    # with the pool victim in it (it passes after the sticky culprit), one without it, and
    # that one's failing run once more (each victim seen failing twice under one command)
    first = by_id(verdict)[CASCADE[1]]
    assert first["probes"][0]["kind"] == "cascade", first  # then its confirmation
    assert first["search"].startswith("cascade"), first
    for victim in CASCADE[2:]:
        test = by_id(verdict)[victim]
        assert len(test["probes"]) == 5, test
        assert test["search"].startswith("group: 4 victims fail"), test
    assert STICKY in stdout


@pytest.mark.slow
def test_the_search_is_bounded(checked: tuple[Path, Path, dict[str, Any], str]) -> None:
    out, _, verdict, _ = checked
    evidence = json.loads((out / "evidence" / "evidence.json").read_text(encoding="utf-8"))
    tests = by_id(verdict)

    def bisection(candidates: int) -> int:  # halve, trying both halves; confirm twice
        return 2 * math.ceil(math.log2(candidates)) + 2

    # the pool victim ran after 11 tests in suite; the consumer after 12; the first sticky
    # victim after 2 in its file (isolated); the first waiting sticky victim 2 cascade runs
    # (the other three answered by the group runs, counted apart); the pool victim, which
    # disagreed in the group run, bisects on its own (the bound keeps its old cascade run);
    # each hog 1 pair, confirmed by a second, and up to 2 more to see which partner test
    # failed its way (2 interpreters each; none for a hog its partner's pairs showed failing
    # beside it: contention is symmetric). The hogs never fail in the suite interpreter
    # (their first test there is another file's: not contenders, `hogs.py`), so no
    # replay of theirs is ever searched.
    bound = bisection(2) + 2 * 4 + (1 + bisection(11)) + bisection(12) + 2 * (2 * 2 + 2)
    runs = evidence["phases"]["culprits"]["runs"]
    pairs = sum(  # a pair probe names a file beside the victim: one more interpreter (a
        # partner's run without its victim, its isolated screen's, names none: not one)
        1
        for hog in HOGS
        for probe in tests[hog].get("probes", ())
        if probe["shown"] and "::" not in probe["shown"][0]
    )
    own = [  # a partner's probes are its victim's pair runs, as it saw them: not its own
        p
        for t in tests.values()
        if "the partner of" not in t.get("search", "")
        for p in t.get("probes", ())
        if "group" not in p.get("kind", "")
    ]
    assert runs == len(own) + pairs
    # the group runs answer every waiting victim at once: 2 runs, 2 more without the pool
    # victim, which disagreed, and the failing one of those once more; a hog that failed in
    # the suite screen (where the screens started it beside its partner) disagreed too, and
    # waits with the pool victim for its culprit in the next round: one more pair (and its
    # failing run once more where it agreed)
    assert evidence["phases"]["groups"]["runs"] in (5, 7, 8), evidence["phases"]
    assert runs <= bound, evidence["phases"]
    assert evidence["runs"] == sum(int(p["runs"]) for p in evidence["phases"].values())


@pytest.mark.slow
def test_reproduce_commands_are_minimal_and_reproduce(
    checked: tuple[Path, Path, dict[str, Any], str], tmp_path: Path
) -> None:
    _, suite, verdict, _ = checked
    tests = by_id(verdict)
    env = environment(suite.parent)
    for victim in (CASCADE[0], POOL_VICTIM):
        command = tests[victim]["reproduce"]
        assert command.endswith(f"python -m pytest {tests[victim]['culprits'][0]} {victim}")
    for victim in CASCADE[1:]:  # answered together: the group run, every test of two files
        command = tests[victim]["reproduce"]
        files = "test_b_victims.py test_c_victims.py"
        assert command.endswith(f"python -m pytest {STICKY} {files}"), command
    assert tests[CONSUMER]["reproduce"].endswith(f"python -m pytest {CONSUMER}")
    for victim in (CASCADE[2], POOL_VICTIM, CONSUMER, HOGS[0]):
        shown = subprocess.run(
            ["bash", "-c", tests[victim]["reproduce"]],
            cwd=suite,  # where gpuci ran: commands are relative to it
            # the pair command starts both hogs at once: they wait for each other
            env=dict(env, HOG_PAIRED="1") if victim in HOGS else env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert f"FAILED {victim}" in shown.stdout, shown.stdout[-2000:]


@pytest.mark.slow
def test_explain_adds_culprits_to_results_of_separate_runs(tmp_path: Path) -> None:
    suite = build_suite(tmp_path)
    env = environment(tmp_path)
    out = tmp_path / "out"
    files = ["test_a_sticky.py", "test_b_victims.py", "test_h_provider.py", "test_i_consumer.py"]
    for mode in ("isolated", "suite"):
        proc = gpuci("run", *files, "--mode", mode, "--out", str(out), cwd=suite, env=env)
        assert proc.returncode == 1, proc.stderr[-2000:]
    # the default budget is the modes' wall, a second or two here: too little to search
    proc = gpuci("explain", str(out), "--evidence-budget", "300", cwd=suite, env=env)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    tests = by_id(verdict)
    for victim in CASCADE[:3]:
        assert tests[victim]["culprits"] == [STICKY]
    assert tests[CONSUMER]["providers"] == [PROVIDER]
    evidence = json.loads((out / "evidence" / "evidence.json").read_text(encoding="utf-8"))
    # the mode jobs' own alone-reruns (2 each) count: explain reran nothing alone
    assert "alone" not in evidence["phases"]


@pytest.mark.slow
def test_explain_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    env = dict(os.environ)
    proc = gpuci("explain", str(tmp_path / "missing"), cwd=tmp_path, env=env)
    assert proc.returncode == 4
    assert proc.stderr.strip().startswith("gpuci: error:")
    assert len(proc.stderr.strip().splitlines()) == 1
    suite = tmp_path / "gone"
    suite.mkdir()
    (suite / "test_x.py").write_text("def test_x():\n    assert False\n", encoding="utf-8")
    out = tmp_path / "out"
    assert (
        gpuci("run", ".", "--mode", "suite", "--out", str(out), cwd=suite, env=env).returncode == 1
    )
    shutil.rmtree(suite)  # its test file and pytest's cache: the suite interpreter's, as plain
    proc = gpuci("explain", str(out), cwd=tmp_path, env=env)
    assert proc.returncode == 3
    assert "not a directory here" in proc.stderr
    assert (out / "suite" / "run.json").exists()  # nothing done is lost


# A stand-in for CuPy's caching pool, just what the poisoning touches: freed blocks come
# back uncleared for an allocation of the same size; fresh blocks read as zeros.
POOL_CUPY = '''
import itertools

MEMORY, FREE, _ptrs = {}, {}, itertools.count(4096, 4096)


class MemoryPointer:
    def __init__(self, ptr, size):
        self.ptr, self.size = ptr, size

    def __del__(self):
        FREE.setdefault(self.size, []).append(self.ptr)


def _pool_malloc(size):
    ptr = FREE.get(size, []).pop() if FREE.get(size) else next(_ptrs)
    MEMORY.setdefault(ptr, bytearray(size))
    return MemoryPointer(ptr, size)


class _Stream:
    ptr = 0


class _Runtime:
    @staticmethod
    def memsetAsync(ptr, value, size, stream):
        MEMORY[ptr][:size] = bytes([value]) * size


class cuda:
    runtime = _Runtime
    _allocator = staticmethod(_pool_malloc)

    @staticmethod
    def get_allocator():
        return cuda._allocator

    @staticmethod
    def set_allocator(allocator):
        cuda._allocator = allocator

    @staticmethod
    def get_current_stream():
        return _Stream()


def empty(n):
    """n bytes, as the allocator hands them out: a list view of the block."""
    block = cuda.get_allocator()(n)
    return block, MEMORY[block.ptr]
'''
POISON_SUITE = {
    "pytest.ini": "[pytest]\n",
    "cupy.py": POOL_CUPY,
    "test_pad.py": """import cupy


def test_fill_and_release():
    block, data = cupy.empty(8)
    data[:] = bytes([7]) * 8
    del block


def test_pad_tail_is_zero():
    block, data = cupy.empty(8)
    data[:6] = bytes(range(1, 7))  # BUG: never writes the padding it returns
    assert data[6:] == bytearray(2), f"padding reads {list(data[6:])}"
""",
    "test_limit.py": """import cupy

LIMIT = []


def test_sets_limit():
    LIMIT.append(4)


def test_big_batch():
    assert not LIMIT, "over the pool limit another test left"
""",
}


@pytest.mark.slow
def test_poisoning_blames_the_reader_of_uninitialized_memory(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    for name, text in POISON_SUITE.items():
        (suite / name).write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    env = dict(os.environ)
    args = ("check", ".", "--out", str(out), "--evidence-budget", "300")
    proc = gpuci(*args, cwd=suite, env=env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    tests = by_id(json.loads((out / "verdict.json").read_text(encoding="utf-8")))
    reader = tests["test_pad.py::test_pad_tail_is_zero"]
    assert reader["category"] == "order-dependent"
    assert reader["poisoned"] == "failed"
    assert reader["diagnosis"].startswith("reads uninitialized device memory")
    assert "culprits" not in reader  # its own bug: the writer before it is not blamed
    # and the command it prints shows that bug: the test alone, poisoned
    assert "GPUCI_POISON=1 " in reader["reproduce"]
    assert reader["reproduce"].endswith("-p gpuci.pytest_plugin test_pad.py::test_pad_tail_is_zero")
    shown = subprocess.run(
        ["bash", "-c", reader["reproduce"]],
        cwd=suite,  # where gpuci ran: commands are relative to it
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "FAILED test_pad.py::test_pad_tail_is_zero" in shown.stdout, shown.stdout[-2000:]
    victim = tests["test_limit.py::test_big_batch"]
    assert victim["poisoned"] == "passed"
    assert "diagnosis" not in victim
    assert victim["culprits"] == ["test_limit.py::test_sets_limit"]


@pytest.mark.slow
def test_poison_makes_the_reader_fail_everywhere(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    for name, text in POISON_SUITE.items():
        (suite / name).write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    args = ("check", ".", "--out", str(out), "--poison", "--evidence-budget", "300")
    proc = gpuci(*args, "--modes", "suite,isolated", cwd=suite, env=dict(os.environ))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    tests = by_id(json.loads((out / "verdict.json").read_text(encoding="utf-8")))
    reader = tests["test_pad.py::test_pad_tail_is_zero"]
    # every interpreter of the check poisons, its alone-runs too: a real failure
    assert reader["category"] == "failed"
    assert reader["reruns"] == ["failed", "failed"]
    # the check's interpreter: `python` where PATH has it, else named
    python = python_word()
    suite_run = json.loads((out / "suite" / "run.json").read_text(encoding="utf-8"))
    seed = suite_run["environment"]["hash_seed"]  # every interpreter's: the command carries it
    assert reader["reproduce"].startswith(  # run where gpuci ran: no `cd`
        f"PYTHONHASHSEED={seed} GPUCI_POISON=1 {python} -m pytest"
    )
    assert suite_run["poison"] is True
    evidence = json.loads((out / "evidence" / "evidence.json").read_text(encoding="utf-8"))
    assert "poisoned" not in evidence["phases"]  # nothing left to poison once more
    assert tests["test_limit.py::test_big_batch"]["culprits"] == ["test_limit.py::test_sets_limit"]
    again = gpuci(*args, "--modes", "suite,isolated", "--resume", cwd=suite, env=dict(os.environ))
    assert again.returncode in (0, 1), again.stderr
    refused = gpuci(
        "check",
        ".",
        "--out",
        str(out),
        "--modes",
        "suite,isolated",
        "--resume",
        cwd=suite,
        env=dict(os.environ),
    )
    assert refused.returncode == 4
    assert "--poison" in refused.stderr
