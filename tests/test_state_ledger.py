"""End-to-end: planted culprits that each leave one kind of host state behind are named, with
what they left, in the runs the state ledger points at (the real CLI, a real subprocess).

Each culprit sits among harmless tests, and its victim in a later file reads exactly what
it left: the working directory, an environment variable, the umask, sys.path, a warnings
filter, a thread, a child process, a signal handler, a logging handler, the decimal
context, open descriptors, and a variable set by a module's import. In the suite
interpreter each victim fails; alone it passes.
The check names each culprit, says on its root what it left, and finds it from the
ledger's hint: two runs (the hint, its confirmation) where the ledger is per test, a few
more where it is per file (the umask, child processes and descriptors cost a read of
/proc: the hint is the file's tests, narrowed). With the ledger off the same search
bisects over every test before the victim.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli_runner import gpuci, write_files

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="the ledger reads /proc: Linux only"),
]

FILLER = """
def test_one(): pass
def test_two(): pass
def test_three(): pass
"""
# kind -> (the culprit's body, the victim's body, words its root's `left` must hold,
# whether the ledger has it per test): each culprit is test_leaves in its own file
PLANTED: dict[str, tuple[str, str, str, bool]] = {
    "cwd": (
        "os.chdir(tmp_path)",
        'assert Path("tests/data.txt").read_text() == "x"',
        "left the working directory at",
        True,
    ),
    "env": (
        'os.environ["APP_MODE"] = "debug"',
        'assert os.environ.get("APP_MODE", "prod") == "prod"',
        "left environment variables set APP_MODE",
        True,
    ),
    "umask": (
        "os.umask(0o077)",
        'p = tmp_path / "f"; p.write_text("x")\n    assert stat.S_IMODE(p.stat().st_mode) == 0o644',
        "left the umask at 0o077",
        False,
    ),
    "syspath": (
        'sys.path[:] = [p for p in sys.path if not p.endswith("tests")]',
        'assert importlib.import_module("planted_helper").VALUE == 1',
        "removed from sys.path",
        True,
    ),
    "warnings": (
        'warnings.simplefilter("error", DeprecationWarning)',
        'warnings.warn("old api", DeprecationWarning)',
        "added warnings filters error::DeprecationWarning",
        True,
    ),
    "thread": (
        'threading.Thread(target=time.sleep, args=(60,), daemon=True, name="poller").start()',
        'assert not [t for t in threading.enumerate() if t.name == "poller"]',
        "left threads running poller (daemon)",
        True,
    ),
    "child": (
        'KEEP.append(subprocess.Popen(["sleep", "60"]))',
        "with pytest.raises(ChildProcessError):\n        os.waitpid(-1, os.WNOHANG)",
        "left child processes running",  # `sleep`, or `python` where it had not exec'd yet
        False,
    ),
    "signal": (
        "signal.signal(signal.SIGUSR1, lambda *_: None)",
        "assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL",
        "left signal handlers SIGUSR1",
        True,
    ),
    "logging": (
        'logging.getLogger("app").addHandler(logging.NullHandler())',
        'assert not logging.getLogger("app").handlers',
        "left logging handlers app: NullHandler",
        True,
    ),
    "decimal": (
        "decimal.getcontext().prec = 6",
        'assert decimal.Decimal(1) / 3 == decimal.Decimal("0.3333333333333333333333333333")',
        "changed the decimal context to prec=6 (was prec=28)",
        True,
    ),
    "fds": (
        'KEEP.extend(open("/dev/null") for _ in range(300))',
        'assert len(os.listdir("/proc/self/fd")) < 200',
        "more descriptor(s) open",
        False,
    ),
    # at the module's import, not in a test: in the suite interpreter before every test
    "import": (
        'os.environ["AT_IMPORT"] = "1"',
        'assert os.environ.get("AT_IMPORT") is None',
        "its file left environment variables set AT_IMPORT",
        False,
    ),
}
IMPORTS = (
    "import decimal, importlib, logging, os, signal, stat, subprocess, sys, threading, time,"
    " warnings\nfrom pathlib import Path\nimport pytest\nKEEP = []\n"
)


def _suite(root: Path, kinds: list[str], *, fillers: bool = True) -> Path:
    """Per kind: a filler file (where `fillers`), the culprit's file (its culprit between
    two harmless tests), the victim's file; in that order, pytest's."""
    files = {
        "pytest.ini": "[pytest]\naddopts = -p no:warnings -p no:randomly\n",
        "tests/data.txt": "x",
        "tests/planted_helper.py": "VALUE = 1\n",
    }
    for i, kind in enumerate(kinds):
        culprit, victim, _, _ = PLANTED[kind]
        if fillers:
            files[f"tests/test_{i:02d}_a_{kind}_filler.py"] = FILLER
        at_import, culprit = (culprit, "pass") if kind == "import" else ("", culprit)
        files[f"tests/test_{i:02d}_b_{kind}_culprit.py"] = (
            f"{IMPORTS}{at_import}\ndef test_before(): pass\n"
            f"def test_leaves(tmp_path):\n    {culprit}\ndef test_after(): pass\n"
        )
        files[f"tests/test_{i:02d}_c_{kind}_victim.py"] = (
            f"{IMPORTS}def test_reads(tmp_path):\n    {victim}\n"
        )
    return write_files(root, files)


def _check(root: Path, out: Path, **env: str) -> dict[str, Any]:
    import os

    # The suite screen alone: the ledger that hints is its interpreter's, where each victim
    # fails (the parallel screen's fresh interpreters pass every test, and show nothing
    # here). One alone-run shows each victim passes alone; a second (the default) proves
    # nothing these tests look at. Each would cost an interpreter per file, or per victim.
    done = gpuci(
        "check", "tests", "--out", str(out), "--evidence-budget", "900", "--reruns", "1",
        "--modes", "suite", cwd=root, env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert (out / "verdict.json").exists(), done.stdout[-4000:] + done.stderr[-4000:]
    return {
        "verdict": json.loads((out / "verdict.json").read_text()),
        "evidence": json.loads((out / "evidence" / "evidence.json").read_text()),
        "comment": (out / "comment.md").read_text(),
        "report": (out / "report.html").read_text(),
        "stdout": done.stdout,
    }


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One check of every planted kind, the ledger on. No filler files: each culprit still
    sits among harmless tests (its file's two, and every earlier kind's files), and a
    per-test hint is one test of them whatever their number; the bisection's test below
    keeps them."""
    root = tmp_path_factory.mktemp("ledger")
    return _check(_suite(root / "suite", list(PLANTED), fillers=False), root / "out")


def victim_of(i: int, kind: str) -> str:
    return f"tests/test_{i:02d}_c_{kind}_victim.py::test_reads"


def test_each_planted_culprit_is_named_with_what_it_left_from_the_ledgers_hint(
    every_kind: dict[str, Any],
) -> None:
    kinds = list(PLANTED)
    found = every_kind
    searches = {t["id"]: t for t in found["evidence"]["tests"] if t.get("search")}
    assert set(searches) == {victim_of(i, kind) for i, kind in enumerate(kinds)}  # no other
    roots = {r["victims"][0]: r for r in found["verdict"]["roots"]}
    for i, kind in enumerate(kinds):
        _, _, words, per_test = PLANTED[kind]
        victim = victim_of(i, kind)
        culprit = f"tests/test_{i:02d}_b_{kind}_culprit.py::test_leaves"
        if kind == "import":  # any of its tests imports it: the narrowing keeps the first
            culprit = culprit.replace("test_leaves", "test_before")
        assert roots[victim]["culprits"] == [culprit], (kind, roots.get(victim))
        assert any(words in line for line in roots[victim]["left"]), (kind, roots[victim])
        search = searches[victim]
        assert search["search"].startswith("ledger:"), (kind, search)
        assert search["probes"][0]["kind"] == "ledger"
        runs = len(search["probes"])
        # per test: the hint, then its confirmation; per file: its 3 tests, then narrowed
        # among them (in parts at once where there are slots) and confirmed
        assert runs == 2 if per_test else 2 <= runs <= 7, (kind, search)
    # the card, the note and the terminal say it too, escaped
    assert "left the working directory at" in found["report"]
    assert "APP_MODE" in found["comment"]
    assert "left the umask at 0o077" in found["stdout"]


def test_without_the_ledger_the_same_culprit_takes_a_bisection(
    tmp_path: Path, every_kind: dict[str, Any]
) -> None:
    # every_kind's first two, their files named alike there (the hint is one test of those
    # before it whatever their number: there without the fillers that make a bisection long)
    kinds = ["cwd", "env"]
    assert list(PLANTED)[: len(kinds)] == kinds
    off = _check(_suite(tmp_path / "suite", kinds), tmp_path / "off", GPUCI_STATE="off")
    victims = [victim_of(i, kind) for i, kind in enumerate(kinds)]
    # without it, the env victim's failure (`assert 'debug' == 'prod'`) still quotes the
    # value its culprit's source writes (the source's hint); the folder left current names
    # nothing any source wrote: a bisection
    off_searches = {t["id"]: t for t in off["evidence"]["tests"] if t.get("search")}
    assert set(off_searches) == set(victims)
    on_searches = {t["id"]: t for t in every_kind["evidence"]["tests"] if t.get("search")}
    for victim, kind in zip(victims, kinds, strict=True):
        off_how = {"cwd": "bisection:", "env": "source:"}[kind]
        assert off_searches[victim]["search"].startswith(off_how), off_searches[victim]
        assert on_searches[victim]["search"].startswith("ledger:"), on_searches[victim]
    # the bisection replays more than the hint: at least its halving over 9+ tests
    bisected = sum(len(t["probes"]) for t in off["evidence"]["tests"] if t.get("probes"))
    hinted = sum(len(on_searches[victim]["probes"]) for victim in victims)
    assert hinted == 4 < bisected
    assert "roots" in off["verdict"] and all("left" not in r for r in off["verdict"]["roots"])


def test_a_clean_check_lists_the_files_that_left_threads_behind_escaped(tmp_path: Path) -> None:
    import os

    name = "<b>poll|er</b>"  # untrusted text: a thread's name, in HTML and in a table cell
    root = write_files(
        tmp_path / "suite",
        {
            "tests/test_a.py": "import threading, time\ndef test_starts():\n"
            "    threading.Thread(target=time.sleep, args=(60,), daemon=True,"
            f" name={name!r}).start()\n",
            "tests/test_b.py": "def test_other(): pass\n",
        },
    )
    out = tmp_path / "out"
    done = gpuci("check", "tests", "--out", str(out), cwd=root, env=dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["left_behind"] == {"tests/test_a.py": [f"left threads running {name} (daemon)"]}
    report = (out / "report.html").read_text()
    assert "&lt;b&gt;poll|er&lt;/b&gt;" in report and name not in report
    comment = (out / "comment.md").read_text()
    row = next(line for line in comment.splitlines() if "test_a.py" in line)
    assert "poll\\|er" in row and name not in comment


FAKE_CUPY = Path(__file__).resolve().parent / "fake_cupy.py"


def test_a_culprit_card_says_only_what_it_left_that_its_victims_failure_can_touch(
    tmp_path: Path,
) -> None:
    """The first test of the first file that reaches the device (a fresh interpreter's) sets
    a pool limit and allocates nothing; its file's next test makes the context, which opens
    the driver's descriptors; a later file's test runs out of memory under the limit. And a
    culprit that leaves a logging handler where its victim fails on a missing module."""
    root = write_files(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\naddopts = -p no:warnings -p no:randomly\n",
            "tests/cupy.py": FAKE_CUPY.read_text(),  # `import cupy` finds it first
            "tests/app_cli.py": "VALUE = 1\n",
            "tests/test_a_budget.py": "import cupy\n"
            "def test_sets_budget():\n"
            "    cupy.get_default_memory_pool().set_limit(size=64 << 20)\n"
            "def test_small():\n    assert cupy.ones(1024)[0] == 1.0\n",
            "tests/test_b_large.py": "import cupy\n"
            "def test_large():\n    assert cupy.ones(32 << 20)[0] == 1.0  # 128 MiB\n",
            "tests/test_c_configures.py": "import logging, sys\n"
            "def test_configures():\n"
            '    logging.getLogger("app").addHandler(logging.NullHandler())\n'
            '    sys.modules["app_cli"] = None  # what the ledger does not see\n',
            "tests/test_d_cli.py": "def test_cli():\n    import app_cli\n",
        },
    )
    found = _check(root, tmp_path / "out")
    roots = {r["victims"][0]: r for r in found["verdict"]["roots"]}
    assert set(roots) == {"tests/test_b_large.py::test_large", "tests/test_d_cli.py::test_cli"}
    large = roots["tests/test_b_large.py::test_large"]
    assert large["culprits"] == ["tests/test_a_budget.py::test_sets_budget"]
    # the limit, and nothing of the driver's descriptors or of processes
    assert large["left"] == ["left a CuPy pool limit of 64.0 MiB"]
    searches = {t["id"]: t for t in found["evidence"]["tests"] if t.get("search")}
    assert searches["tests/test_b_large.py::test_large"]["search"].startswith("ledger:")
    cli = roots["tests/test_d_cli.py::test_cli"]
    assert cli["culprits"] == ["tests/test_c_configures.py::test_configures"]
    assert "left" not in cli  # its logging handler is no cause of a missing module
    assert "NullHandler" not in found["report"] + found["comment"] + found["stdout"]
