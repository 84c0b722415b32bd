"""The command line as a user meets it, through the real CLI: --help's sections, examples
and exit codes; pytest's options given before `--`; -q, -v and colour on a verdict's
summary (`gpuci diff` of the committed scenario: one interpreter, no suite to run)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from gpuci.formats import read_verdict
from gpuci.model import UsageError
from gpuci.report.summary import format_summary
from tests.cli_runner import gpuci

SCENARIO = Path(__file__).parent / "data" / "diff" / "out"
ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def test_help_lists_check_first_with_examples_and_exit_codes(tmp_path: Path) -> None:
    proc = gpuci("--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    commands = re.findall(r"^    (\w+) ", proc.stdout, re.MULTILINE)
    assert commands[0] == "check"
    assert set(commands) == {"check", "run", "explain", "diff", "merge", "report", "publish"}
    assert "gpuci check tests --out out -- -k attention" in proc.stdout
    for code in ("  0  the plain pytest run exited 0", "  4  a usage error", "  5  no tests ran"):
        assert code in proc.stdout


def test_check_help_is_grouped_in_the_order_a_user_asks(tmp_path: Path) -> None:
    proc = gpuci("check", "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    titles = re.findall(r"^(\S[^:\n]*):$", proc.stdout, re.MULTILINE)
    assert titles == [
        "options",
        "what to check",
        "how",
        "evidence",
        "output",
        "GitLab",
        "examples",
        "exit codes",
    ]
    sections = dict(re.findall(r"^(\S[^:\n]*):\n(.*?)(?=^\S|\Z)", proc.stdout, re.M | re.S))
    assert "--modes" in sections["what to check"] and "--workers" in sections["how"]
    assert "--reruns" in sections["evidence"] and "--sanitize" in sections["evidence"]
    assert "--out" in sections["output"] and "-q, --quiet" in sections["output"]
    assert "--baseline" in sections["GitLab"] and "--allow" in sections["GitLab"]


def test_pytests_option_before_the_separator_is_named_with_the_command_to_type(
    tmp_path: Path,
) -> None:
    proc = gpuci("check", "tests", "-k", "foo", cwd=tmp_path)
    assert proc.returncode == UsageError.exit_code
    assert proc.stderr == (
        "gpuci: error: -k is pytest's option: put pytest's options after --,"
        " e.g. gpuci check tests -- -k foo\n"
    )


def test_no_option_is_abbreviated_so_pytests_short_forms_are_not_gpucis(tmp_path: Path) -> None:
    # --co is pytest's --collect-only; argparse would have read it as gpuci's --color
    proc = gpuci("check", "tests", "--out", "out", "--co", cwd=tmp_path)
    assert proc.returncode == UsageError.exit_code
    assert proc.stderr.startswith("gpuci: error: --co is pytest's option:")
    assert not (tmp_path / "out").exists()


def scenario(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(SCENARIO, out)
    return out


def test_quiet_and_colour_asked_on_the_command_line(tmp_path: Path) -> None:
    out = scenario(tmp_path)
    written = tmp_path / "v.json"
    proc = gpuci("diff", str(out), "-o", str(written), "-q", "--color=yes", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    said = proc.stdout.splitlines()[:-1]  # then `gpuci: wrote ...`
    assert said[-1].startswith("verdict: \x1b[31mfail\x1b[0m (")
    # what the default prints of the same verdict, by the lines -q keeps: each finding's
    # headline (no indented line), the counts, the modes and the verdict; no evidence line
    default = format_summary(read_verdict(written)).splitlines()
    kept = [line for line in default if line[:1] != " " and not line.startswith("evidence: ")]
    assert [ESCAPE.sub("", line) for line in said] == kept
    assert len(kept) < len(default)


def test_colour_forced_by_the_environment_in_a_pipe(tmp_path: Path) -> None:
    out = scenario(tmp_path)
    env = {"FORCE_COLOR": "1", "PATH": "/usr/bin:/bin"}
    forced = gpuci("diff", str(out), "-o", str(tmp_path / "v.json"), cwd=tmp_path, env=env)
    assert "verdict: \x1b[31mfail\x1b[0m" in forced.stdout, forced.stderr


def test_colour_refused_on_the_command_line_whatever_the_environment(tmp_path: Path) -> None:
    out = scenario(tmp_path)
    env = {"FORCE_COLOR": "1", "PATH": "/usr/bin:/bin"}
    args = ("diff", str(out), "--color=no", "-o", str(tmp_path / "v.json"))
    refused = gpuci(*args, cwd=tmp_path, env=env)
    assert refused.returncode == 1 and "verdict: fail" in refused.stdout, refused.stderr
    assert "\x1b" not in refused.stdout + refused.stderr
