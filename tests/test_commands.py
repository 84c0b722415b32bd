"""End-to-end: what a check prints for people to paste and to read, through the real CLI.

- A reproduce command names the interpreter the check ran where `python` on the PATH is
  another one (a src-layout project's command imported an installed copy instead of the
  checkout under test), and keeps `python` where it is the same one.
- A secret in a failure's message is masked wherever it lands, its fingerprint included
  (a fingerprint normalizes digits: masked afterwards, the secret no longer matched).
- A secret pytest shortened to its two ends (`'glcbt-64_x9...12-3456-cdEF'`) leaves no
  six characters of itself anywhere: not in a file under OUT, not on the terminal.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import gpuci

FAILING = "def test_fails():\n    assert 1 == 2, 'a real failure'\n"
# digits after a dash are a number to the fingerprint: `tok-N-...` no longer matched
JOB_TOKEN = "tok-2026-a1b2c3d4e5f6"  # noqa: S105 (a test token)
LEAKING = (
    "import os\n\n\ndef test_leaks():\n"
    "    raise RuntimeError(f\"401 for token {os.environ['CI_JOB_TOKEN']} at step 3\")\n"
)

# GitLab's job token and a personal access token, past their public prefixes
SHORTENED_TOKENS = {"CI_JOB_TOKEN": "glcbt-64_x9Kq2mZpL0wE", "GITLAB_TOKEN": "glpat-Ab12-3456-cdEF"}
SHORTENING = (
    "import os\n\nimport pytest\n\n\n"
    "@pytest.mark.parametrize('token', [os.environ['CI_JOB_TOKEN']])\n"
    "def test_shortened(token):\n"
    "    assert token + ' ' + os.environ['GITLAB_TOKEN'] == 'x'\n"
)


def suite(root: Path, text: str) -> Path:
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (root / "test_x.py").write_text(text, encoding="utf-8")
    return root


@pytest.mark.slow
def test_a_command_names_the_interpreter_where_path_has_another(tmp_path: Path) -> None:
    root = suite(tmp_path / "suite", FAILING)
    other = tmp_path / "bin"
    other.mkdir()
    python = other / "python"  # another interpreter: one that cannot run the suite
    python.write_text("#!/bin/sh\necho 'not the checked interpreter' >&2\nexit 9\n")
    python.chmod(0o755)
    env = dict(os.environ, PATH=f"{other}{os.pathsep}/usr/bin{os.pathsep}/bin")
    proc = gpuci("check", ".", "--out", str(tmp_path / "out"), cwd=root, env=env)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text(encoding="utf-8"))
    command = verdict["tests"][0]["reproduce"]
    suite_run = json.loads((tmp_path / "out" / "suite" / "run.json").read_text(encoding="utf-8"))
    seed = suite_run["environment"]["hash_seed"]  # every interpreter's: the command carries it
    # run where gpuci ran (the suite's root): no `cd`
    assert command.startswith(f"PYTHONHASHSEED={seed} {shlex.quote(sys.executable)} -m pytest "), (
        command
    )
    assert f"reproduce: {command}" in proc.stdout
    # pasted where that PATH holds, it runs the check's interpreter and shows the failure
    shown = subprocess.run(
        ["/bin/sh", "-c", command], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    assert "FAILED test_x.py::test_fails" in shown.stdout, shown.stdout + shown.stderr


@pytest.mark.slow
def test_a_command_keeps_python_where_it_is_the_same_interpreter(tmp_path: Path) -> None:
    root = suite(tmp_path / "suite", FAILING)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = gpuci(
        "check", ".", "--out", str(tmp_path / "out"), cwd=root, env={**os.environ, "PATH": path}
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text(encoding="utf-8"))
    seed = verdict["environment"]["hash_seed"]  # every interpreter's: the command carries it
    assert verdict["tests"][0]["reproduce"].startswith(f"PYTHONHASHSEED={seed} python -m pytest ")
    assert "interpreter" not in verdict["environment"]


@pytest.mark.slow
def test_a_secret_is_masked_after_the_fingerprint_normalized_it(tmp_path: Path) -> None:
    root = suite(tmp_path / "suite", LEAKING)
    out = tmp_path / "out"
    env = dict(os.environ, CI_JOB_TOKEN=JOB_TOKEN)
    proc = gpuci("check", ".", "--out", str(out), cwd=root, env=env)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    test = json.loads((out / "verdict.json").read_text(encoding="utf-8"))["tests"][0]
    assert "[MASKED]" in test["message"]
    assert "[MASKED]" in test["fingerprint"], test["fingerprint"]
    secret_part = JOB_TOKEN.rpartition("-")[2]  # what normalizing the digits leaves of it
    for name in ("verdict.json", "report.html", "comment.md"):
        assert secret_part not in (out / name).read_text(encoding="utf-8"), name
    assert secret_part not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_no_six_characters_of_a_shortened_secret_survive(tmp_path: Path) -> None:
    root = suite(tmp_path / "suite", SHORTENING)
    out = tmp_path / "out"
    proc = gpuci("check", ".", "--out", str(out), cwd=root, env=os.environ | SHORTENED_TOKENS)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    message = json.loads((out / "verdict.json").read_text(encoding="utf-8"))["tests"][0]
    assert "...[MASKED]" in message["message"], message["message"]  # pytest did shorten it
    pieces = {
        body[i : i + 6]
        for body in ("64_x9Kq2mZpL0wE", "Ab12-3456-cdEF")
        for i in range(len(body) - 5)
    }
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"run.json", "evidence.json", "suite.log", "comment.md"} <= {p.name for p in files}
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        assert not [p for p in pieces if p in text], path
    assert not [p for p in pieces if p in proc.stdout + proc.stderr], proc.stderr


# ids pytest can produce, each in a printed command: a newline, quotes, `$`, backslashes,
# non-ASCII, a bidirectional override, spaces, brackets; file names with the same and a
# leading `-` (which pytest would read as an option)
ODD_IDS = {
    "pytest.ini": (
        "[pytest]\npython_files = *.py\n"
        "disable_test_id_escaping_and_forfeit_all_rights_to_community_support = true\n"
    ),
    "test_params.py": (
        "import pytest\n\n\n"
        "@pytest.mark.parametrize('x', ['a\\nb', \"it's $HOME\", 'back\\\\slash', "
        "'\\u202eevil', '[x] -y', 'q\"d `id`', 'tab\\there', 'ünï'])\n"
        "def test_p(x):\n    assert x == 'no such value'\n"
    ),
    "test_$x ü's.py": "def test_f():\n    assert False\n",
    "-lead.py": "def test_g():\n    assert False\n",
    "test_nl\nx.py": "def test_h():\n    assert False\n",
}


def _ran(command: str, cwd: Path, journal: Path) -> list[str]:
    """The ids `command` ran, pasted into bash, as gpuci's own plugin journals them."""
    journal.unlink(missing_ok=True)
    env = dict(os.environ, GPUCI_JOURNAL=str(journal), PYTEST_ADDOPTS="-p gpuci.pytest_plugin")
    shown = subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert shown.returncode == 1, command + shown.stdout[-2000:] + shown.stderr[-2000:]
    events = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]
    return [e["id"] for e in events if e["e"] == "finish"]


@pytest.mark.slow
def test_every_printed_command_runs_in_bash_exactly_the_test_it_names(tmp_path: Path) -> None:
    root = tmp_path / "suite"
    root.mkdir()
    for name, text in ODD_IDS.items():
        (root / name).write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    proc = gpuci("check", ".", "--out", str(out), "--reruns", "0", cwd=root)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (out / "verdict.json").is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    tests = json.loads((out / "verdict.json").read_text(encoding="utf-8"))["tests"]
    assert len(tests) == 11 and {t["category"] for t in tests} == {"failed"}, tests
    assert "test_params.py::test_p[a\nb]" in {t["id"] for t in tests}
    journal = tmp_path / "journal.jsonl"
    for test in tests:
        command = test["reproduce"]
        assert "\n" not in command, command
        assert _ran(command, root, journal) == [test["id"]], command
    # what the terminal prints is what runs, one line each
    printed = [
        line.split(": ", 1)[1]
        for line in proc.stdout.splitlines()
        if line.lstrip().startswith("reproduce")
    ]
    assert printed and set(printed) <= {t["reproduce"] for t in tests}, printed
    comment = (out / "comment.md").read_text(encoding="utf-8")
    assert all(c in comment for c in printed), comment
