"""End-to-end: the latent orders (`reversed`, `shuffled:SEED`) find polluters and providers
collected after their victims, which the plain run cannot show; a latent finding warns,
`--fail-on` and a baseline judge it; a clean suite gives none."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_runner import gpuci, write_files

from gpuci.evidence.latent import latent_order
from gpuci.model import Category, Mode, Outcome, TestVerdict, UsageError
from gpuci.run.proc.discover import Discovery
from gpuci.run.sched.modes import (
    AskedModes,
    asked_modes,
    choose_modes,
    files_in_order,
    order_label,
    parse_modes,
)
from gpuci.verdict.policy import parse_policy

# Three polluters of three kinds, each collected after its victim (test_a < test_z): the plain
# run passes every test, the reversed order fails each victim after its own polluter.
POLLUTED = {
    "pytest.ini": "[pytest]\n",
    "registry.py": """
        HANDLERS = {}
        CACHE = []
    """,
    "test_a_victims.py": """
        import os
        import registry

        def test_env_unset():
            assert "LATENT_MODE" not in os.environ

        def test_no_handler():
            assert registry.HANDLERS == {}

        def test_cache_empty():
            assert registry.CACHE == []

        def test_unrelated():
            assert 1 + 1 == 2
    """,
    "test_m_clean.py": """
        def test_clean():
            assert sum(range(4)) == 6
    """,
    "test_z_polluters.py": """
        import os
        import registry

        def test_sets_env():
            os.environ["LATENT_MODE"] = "on"

        def test_registers_handler():
            registry.HANDLERS["json"] = object()

        def test_fills_cache():
            registry.CACHE.append(1)

        def test_harmless():
            assert True
    """,
}
VICTIMS = {
    "test_a_victims.py::test_env_unset": "test_z_polluters.py::test_sets_env",
    "test_a_victims.py::test_no_handler": "test_z_polluters.py::test_registers_handler",
    "test_a_victims.py::test_cache_empty": "test_z_polluters.py::test_fills_cache",
}

# A dependent collected before its provider (test_a < test_e: the plain run fails it, alone
# it fails, reversed passes it), and a victim whose polluter runs after it and whose cleaner
# runs between them in reverse order (test_b < test_c < test_d): only a shuffle that puts the
# polluter before it, the cleaner elsewhere, shows it. Seed 1 orders c, d, e, a, b.
BETWEEN = {
    "pytest.ini": "[pytest]\n",
    "test_a_needs_provider.py": """
        import os

        def test_needs_provider():
            assert os.environ.get("PROVIDED") == "yes"
    """,
    "test_b_victim.py": """
        import os

        def test_victim():
            assert "POLLUTED" not in os.environ
    """,
    "test_c_cleaner.py": """
        import os

        def test_cleans():
            os.environ.pop("POLLUTED", None)
    """,
    "test_d_polluter.py": """
        import os

        def test_pollutes():
            os.environ["POLLUTED"] = "1"
    """,
    "test_e_provider.py": """
        import os

        def test_provides():
            os.environ["PROVIDED"] = "yes"
    """,
}
SEED = 1
SHUFFLED = [
    "test_c_cleaner.py",
    "test_d_polluter.py",
    "test_e_provider.py",
    "test_a_needs_provider.py",
    "test_b_victim.py",
]


P, F = Outcome.PASSED, Outcome.FAILED


def test_shuffled_takes_a_seed_and_only_it() -> None:
    assert parse_modes("suite,shuffled:42,reversed") == [Mode.SUITE, Mode.SHUFFLED, Mode.REVERSED]
    asked = asked_modes("suite,shuffled:42", {}, "python")
    assert (asked.modes, asked.seed) == ([Mode.SUITE, Mode.SHUFFLED], 42)
    assert asked_modes("shuffled", {}, "python").seed is None  # the check draws one
    for bad, said in (
        ("shuffled:x", "the seed must be a whole number"),
        ("shuffled:-1", "the seed must be a whole number"),
        ("reversed:3", "only shuffled takes a seed"),
        ("shuffled:1,shuffled:2", "choose each at most once"),
    ):
        with pytest.raises(UsageError, match=said):
            parse_modes(bad)


def test_the_orders_keep_every_file_once() -> None:
    files = [f"test_{n}.py" for n in "abcdef"]
    assert files_in_order(Mode.REVERSED, files, None) == files[::-1]
    assert files_in_order(Mode.SUITE, files, None) == files
    shuffled = files_in_order(Mode.SHUFFLED, files, 7)
    assert sorted(shuffled) == files and shuffled != files
    assert files_in_order(Mode.SHUFFLED, files, 7) == shuffled  # the seed replays it
    assert files_in_order(Mode.SHUFFLED, files, 8) != shuffled
    assert order_label(Mode.SHUFFLED, 7) == "shuffled:7"
    assert order_label(Mode.REVERSED, None) == "reversed"


def test_reversed_is_on_by_default_from_two_gpus() -> None:
    nobody = AskedModes(modes=None, asker="")
    discovery = Discovery(rootdir=Path(), files=())
    for gpus, runs in ((0, False), (1, False), (2, True), (4, True)):
        modes, why = choose_modes(nobody, discovery, gpus)
        assert (Mode.REVERSED in modes) is runs, (gpus, why[Mode.REVERSED])
        assert Mode.SHUFFLED not in modes
    modes, _ = choose_modes(nobody, discovery, 2)
    assert modes[:2] == [Mode.SUITE, Mode.REVERSED]  # beside the suite, in the screens
    asked = AskedModes(modes=[Mode.SUITE], asker="--modes suite")
    assert choose_modes(asked, discovery, 2)[0] == [Mode.SUITE]  # --modes decides


@pytest.mark.parametrize(
    ("category", "outcomes", "latent"),
    [
        # failed only in a latent order: latent there
        (Category.ORDER_DEPENDENT, {Mode.SUITE: P, Mode.REVERSED: F}, Mode.REVERSED),
        (Category.ORDER_DEPENDENT, {Mode.SUITE: P, Mode.SHUFFLED: F}, Mode.SHUFFLED),
        # the plain run or a per-file mode showed it too: not latent
        (Category.ORDER_DEPENDENT, {Mode.SUITE: F, Mode.REVERSED: F}, None),
        (Category.ORDER_DEPENDENT, {Mode.ISOLATED: F, Mode.REVERSED: F}, None),
        (Category.ORDER_DEPENDENT, {Mode.SUITE: F, Mode.REVERSED: P}, None),
        # passed only in a latent order (a pass in threads clears nothing)
        (
            Category.DEPENDS_ON_OTHERS,
            {Mode.SUITE: F, Mode.REVERSED: P, Mode.THREADS: P},
            Mode.REVERSED,
        ),
        (Category.DEPENDS_ON_OTHERS, {Mode.SUITE: P, Mode.REVERSED: P}, None),
        (Category.CRASHED, {Mode.SUITE: P, Mode.REVERSED: Outcome.CRASHED}, Mode.REVERSED),
        (Category.CONCURRENCY, {Mode.PARALLEL: F, Mode.REVERSED: F}, None),
        (Category.FAILED, {Mode.SUITE: F, Mode.REVERSED: F}, None),
    ],
)
def test_latent_is_what_only_a_latent_order_showed(
    category: Category, outcomes: dict[Mode, Outcome], latent: Mode | None
) -> None:
    assert latent_order(category, outcomes) is latent


def test_a_latent_finding_warns_unless_fail_on_names_it() -> None:
    def verdict(found_in: str, category: Category = Category.ORDER_DEPENDENT) -> TestVerdict:
        return TestVerdict(
            id="t.py::t", file="t.py", category=category, outcomes={}, found_in=found_in
        )

    latent, plain = verdict("reversed"), verdict("")
    default = parse_policy(None, None)
    assert not default.fails(latent) and default.warns(latent)
    assert default.fails(plain)
    for fail_on in ("latent", "order-dependent", "latent,order-dependent"):
        assert parse_policy(fail_on, None).fails(latent), fail_on
    # `latent` alone keeps the default categories; named ones replace them
    assert parse_policy("latent", None).fails(verdict("", Category.FAILED))
    assert not parse_policy("latent,crashed", None).fails(latent)
    assert parse_policy("latent", "order-dependent").fails(latent) is False  # allowed
    with pytest.raises(UsageError, match="latent"):
        parse_policy(None, "latent")  # --allow names categories and known


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def by_id(out: Path) -> dict[str, dict[str, Any]]:
    return {t["id"]: t for t in read(out / "verdict.json")["tests"]}


def files_in_run(run: dict[str, Any]) -> list[str]:
    """The files of a run.json's tests, in the order its interpreter ran them."""
    return list(dict.fromkeys(t["id"].partition("::")[0] for t in run["tests"]))


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def polluted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int]:
    root = write_files(tmp_path_factory.mktemp("latent") / "suite", POLLUTED)
    proc = gpuci("check", ".", "--out", "out", "--modes", "suite,reversed", cwd=root)
    return root / "out", proc.stdout + proc.stderr, proc.returncode


@pytest.mark.slow
def test_polluters_collected_after_their_victims_are_latent_with_their_culprits(
    polluted: tuple[Path, str, int],
) -> None:
    out, said, code = polluted
    # the plain run passed every test: a latent finding warns, the check exits 0
    assert code == 0, said[-3000:]
    verdict = read(out / "verdict.json")
    assert verdict["verdict"] == "warn"
    assert verdict["reasons"][0].startswith("3 latent isolation problems — 3 polluters")
    assert "found in the reversed order" in verdict["reasons"][0]
    # the reversed interpreter ran the files in reverse collection order
    reversed_run = read(out / "reversed" / "run.json")
    assert files_in_run(reversed_run) == [
        "test_z_polluters.py",
        "test_m_clean.py",
        "test_a_victims.py",
    ]
    tests = by_id(out)
    for victim, culprit in VICTIMS.items():
        test = tests[victim]
        assert test["category"] == "order-dependent", test
        assert test["outcomes"] == {"suite": "passed", "reversed": "failed"}
        assert (test["latent"], test["found_in"]) == (True, "reversed")
        assert test["culprits"] == [culprit]
        # its commands replay the order that shows it: the culprit, then the victim
        assert test["reproduce"].endswith(f" {culprit} {victim}")
        assert test["passes_alone"].endswith(f" -m pytest {victim}")
    # pasted into a shell, they show it both ways: after its culprit it fails, alone not
    first = tests[next(iter(VICTIMS))]
    fails = shell(first["reproduce"], out.parent)
    assert fails.returncode == 1 and "1 failed, 1 passed" in fails.stdout, fails.stdout
    passes = shell(first["passes_alone"], out.parent)
    assert passes.returncode == 0 and "1 passed" in passes.stdout, passes.stdout
    # the state ledger says what the environment polluter left, read from the reversed run
    roots = {tuple(r["culprits"]): r for r in verdict["roots"]}
    assert roots[("test_z_polluters.py::test_sets_env",)]["left"] == [
        "left environment variables set LATENT_MODE"
    ]
    for clean in ("test_a_victims.py::test_unrelated", "test_m_clean.py::test_clean"):
        assert tests[clean]["category"] == "passed" and "latent" not in tests[clean]
    # the terminal, the note and the report say in which order it was found
    assert "latent: found in the reversed order" in said
    comment = (out / "comment.md").read_text(encoding="utf-8")
    assert comment.count("(latent: found in the reversed order") == 3
    assert "latent: reversed" in (out / "report.html").read_text(encoding="utf-8")


@pytest.mark.slow
def test_policy_and_baseline_judge_a_latent_finding(polluted: tuple[Path, str, int]) -> None:
    out, _, _ = polluted
    root = out.parent
    # --fail-on latent (the default categories, latent ones too) or the category named fails
    for fail_on in ("latent", "order-dependent"):
        proc = gpuci("diff", "out", "--fail-on", fail_on, "-o", "judged.json", cwd=root)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert read(root / "judged.json")["verdict"] == "fail"
    # --fail-on naming other categories leaves the findings' out: allowed, and said so
    proc = gpuci("diff", "out", "--fail-on", "failed", "-o", "judged.json", cwd=root)
    judged = read(root / "judged.json")
    assert proc.returncode == 0 and judged["verdict"] == "pass"
    assert judged["reasons"][0].startswith("3 latent isolation problems allowed"), judged
    # with a baseline that had one of them: the other two are new, that one known
    baseline = read(out / "verdict.json")
    known = "test_a_victims.py::test_env_unset"
    baseline["tests"] = [t for t in baseline["tests"] if t["id"] == known]
    (root / "baseline.json").write_text(json.dumps(baseline), encoding="utf-8")
    proc = gpuci("diff", "out", "--baseline", "baseline.json", "-o", "judged.json", cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    judged = {t["id"]: t for t in read(root / "judged.json")["tests"]}
    assert {v: judged[v]["new"] for v in VICTIMS} == {
        known: False,
        "test_a_victims.py::test_no_handler": True,
        "test_a_victims.py::test_cache_empty": True,
    }
    reasons = read(root / "judged.json")["reasons"]
    assert reasons[0].startswith("2 new latent isolation regressions"), reasons
    assert reasons[1].startswith("1 known latent isolation problem"), reasons


@pytest.mark.slow
def test_a_provider_after_its_dependent_and_a_victim_between_its_polluters(
    tmp_path: Path,
) -> None:
    root = write_files(tmp_path / "suite", BETWEEN)
    modes = f"suite,reversed,shuffled:{SEED}"
    proc = gpuci("check", ".", "--out", "out", "--modes", modes, cwd=root)
    said = proc.stdout + proc.stderr
    # the plain run failed the dependent: so does the check, whatever the policy
    assert proc.returncode == 1, said[-3000:]
    out = root / "out"
    shuffled = read(out / "shuffled" / "run.json")
    assert shuffled["shuffle_seed"] == SEED
    assert files_in_run(shuffled) == SHUFFLED
    assert f"shuffled: seed {SEED}" in said
    tests = by_id(out)
    dependent = tests["test_a_needs_provider.py::test_needs_provider"]
    assert dependent["category"] == "depends-on-others", dependent
    assert (dependent["latent"], dependent["found_in"]) == (True, "reversed")
    assert dependent["providers"] == ["test_e_provider.py::test_provides"]
    assert shell(dependent["reproduce"], root).returncode == 1  # alone it fails
    assert shell(dependent["with_provider"], root).returncode == 0  # after its provider not
    # the reversed order ran the cleaner between polluter and victim; the shuffle did not
    victim = tests["test_b_victim.py::test_victim"]
    assert victim["outcomes"]["reversed"] == "passed"
    assert victim["category"] == "order-dependent", victim
    assert victim["found_in"] == f"shuffled:{SEED}"
    assert victim["culprits"] == ["test_d_polluter.py::test_pollutes"]
    assert shell(victim["reproduce"], root).returncode == 1
    assert shell(victim["passes_alone"], root).returncode == 0


@pytest.mark.slow
def test_a_clean_suite_on_two_gpus_runs_reversed_on_its_own_first_gpu_and_finds_nothing(
    tmp_path: Path,
) -> None:
    # no GPU here: --gpus names two, as CUDA_VISIBLE_DEVICES would, and nothing reads them
    files = {k: v for k, v in POLLUTED.items() if k != "test_z_polluters.py"}
    root = write_files(tmp_path / "suite", files)
    proc = gpuci("check", ".", "--out", "out", "--gpus", "0,1", "--workers", "1", cwd=root)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-3000:]
    out = root / "out"
    verdict = read(out / "verdict.json")
    assert verdict["verdict"] == "pass" and verdict["reasons"] == []
    assert not any(t.get("latent") for t in verdict["tests"])
    # on by default with two GPUs, beside the suite interpreter, first on the other GPU
    assert verdict["checked"]["reversed"]["ran"] is True
    assert "default with 2 GPUs" in verdict["checked"]["reversed"]["why"]
    suite = read(out / "suite" / "run.json")["files"]
    reversed_files = read(out / "reversed" / "run.json")["files"]
    assert [(f["slot"], f["gpu"]) for f in suite] == [(0, "0,1")]
    assert [(f["slot"], f["gpu"]) for f in reversed_files] == [(1, "1,0")]
    parallel = read(out / "parallel" / "run.json")["files"]
    assert {f["slot"] for f in parallel} == {2}  # the files' one worker, after both
    assert files_in_run(read(out / "reversed" / "run.json")) == [
        "test_m_clean.py",
        "test_a_victims.py",
    ]
