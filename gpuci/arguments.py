"""The command line's grammar: `gpuci`'s subcommands, their options and how each option's
text is read (a mistake is one `gpuci: error:` line, exit 4: pytest's usage error);
`gpuci.cli` runs what it parsed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from gpuci import __version__
from gpuci.model import Mode, UsageError

# at least the plain pytest run's exit status; pytest's own codes keep their meanings
EXIT_CODES = (
    "exit status: 0 the plain pytest run exited 0 and the verdict passes; 1 the verdict"
    " failed, or the plain run exited 1; 2 interrupted (pytest's, or Ctrl-C: --resume goes"
    " on); 3 an internal error (pytest's, or gpuci's own); 4 a usage error (pytest's or"
    " gpuci's); 5 no tests ran (pytest's)"
)
DEFAULT_REPORT_HTML = "report.html"
DEFAULT_COMMENT_MD = "comment.md"


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError, so every mistake is one `gpuci: error:` line."""

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("gpuci").strip()
        raise UsageError(f"{where}: {message}" if where else message)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None


def _positive_float(text: str) -> float:
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def _seconds(text: str) -> float:
    value = _float(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more, got {text}")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _count(text: str) -> int:
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _threads(text: str) -> int:
    value = _whole(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be 2 or more (threads at once), got {value}")
    return value


def _run_options() -> _Parser:
    """Options shared by `run` and `check`."""
    parent = _Parser(add_help=False)
    parent.add_argument("paths", nargs="+", metavar="PATH", help="test files or directories")
    parent.add_argument("--out", required=True, type=Path, help="results directory")
    parent.add_argument("--workers", help="parallel interpreters: N or auto (default auto)")
    parent.add_argument("--timeout", type=_positive_float, help="most seconds one test may run")
    parent.add_argument(
        "--reruns", type=_count, help="alone-reruns per non-passing test (default 2)"
    )
    parent.add_argument("--shard", help="run shard I of N (default: CI_NODE_INDEX/CI_NODE_TOTAL)")
    parent.add_argument("--gpus", help="GPUs every interpreter sees, e.g. 0,1 (default: all)")
    parent.add_argument(
        "--gpus-per-slot",
        type=_whole,
        help="give each parallel slot its own N GPUs (default: every slot sees all, rotated)",
    )
    parent.add_argument(
        "--evidence-budget",
        type=_seconds,
        help="most seconds of evidence runs after the main passes (check's default: what its"
        " isolation suspects need, from the main passes' times: alone-runs, a poisoned run,"
        " a culprit search, a compute-sanitizer block each, and 3 alone-runs per group of"
        " identical failures; x1.5, at most 1800 s; run's default: no limit)",
    )
    parent.add_argument(
        "--threads",
        type=_threads,
        help="threads mode: run each test in N threads at once (default: the suite's"
        " --parallel-threads where its pytest configuration sets one, else 4)",
    )
    parent.add_argument(
        "--durations",
        type=Path,
        help="an earlier check's durations.json (or a run.json or results directory):"
        " the longest files start first",
    )
    parent.add_argument(
        "--poison",
        action="store_true",
        help="fill every fresh CuPy or PyTorch allocation with 0xFF in every interpreter:"
        " a read of uninitialized device memory fails everywhere, alone too",
    )
    parent.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted OUT: keep what finished, run the rest",
    )
    parent.add_argument("--python", default=sys.executable, help=argparse.SUPPRESS)
    return parent


def _diff_options() -> _Parser:
    """Options shared by `diff` and `check`."""
    parent = _Parser(add_help=False)
    parent.add_argument("--baseline", type=Path, help="the target branch's verdict.json")
    parent.add_argument("--fail-on", help="categories that fail the verdict (comma list)")
    parent.add_argument("--allow", help="categories (or 'known') that never fail it")
    return parent


def _sanitize_options() -> _Parser:
    """--sanitize, shared by `check` and `explain`."""
    parent = _Parser(add_help=False)
    parent.add_argument(
        "--sanitize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rerun each root that crashed or failed with a CUDA error alone under"
        " compute-sanitizer memcheck (default: where compute-sanitizer is found)",
    )
    return parent


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, with one subcommand per stage."""
    parser = _Parser(
        prog="gpuci", description="Catch GPU test-isolation regressions in CI.", epilog=EXIT_CODES
    )
    parser.add_argument("--version", action="version", version=f"gpuci {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run_parent, diff_parent, sanitize_parent = _run_options(), _diff_options(), _sanitize_options()

    run = sub.add_parser(
        "run",
        parents=[run_parent],
        help="run a suite in one mode",
        usage="gpuci run PATHS... --mode MODE --out OUT [options] [-- PYTEST_ARGS...]",
    )
    run.add_argument("--mode", required=True, choices=[m.value for m in Mode])
    # check's alone: parsed here too, so that `gpuci run --serial-modes` is told why not
    run.add_argument("--serial-modes", action="store_true", help=argparse.SUPPRESS)
    run.add_argument(
        "--allow", help="'skipped': a run where every test skipped passes (default: it fails)"
    )

    merge = sub.add_parser("merge", help="merge JUnit XML of files, shards and modes")
    merge.add_argument("inputs", nargs="+", type=Path, metavar="INPUT")
    merge.add_argument("-o", "--output", required=True, type=Path)

    diff = sub.add_parser("diff", parents=[diff_parent], help="classify every test: verdict.json")
    diff.add_argument("out", type=Path, metavar="OUT")
    diff.add_argument("-o", "--output", type=Path, help="default: OUT/verdict.json")

    report = sub.add_parser("report", help="render the HTML report and the MR comment")
    report.add_argument("verdict", type=Path, metavar="VERDICT.json")
    report.add_argument("--html", type=Path, help=f"default: {DEFAULT_REPORT_HTML} beside it")
    report.add_argument("--markdown", type=Path, help=f"default: {DEFAULT_COMMENT_MD} beside it")

    publish = sub.add_parser("publish", help="create or update the merge-request note")
    publish.add_argument("comment", type=Path, metavar="COMMENT.md")
    publish.add_argument("--dry-run", action="store_true", help="say what would be posted")

    check = sub.add_parser(
        "check",
        parents=[run_parent, diff_parent, sanitize_parent],
        help="all modes, diff and report in one",
        usage="gpuci check PATHS... --out OUT [options] [-- PYTEST_ARGS...]",
    )
    check.add_argument(
        "--modes",
        help="modes to run, in order (comma list; default suite,parallel,isolated, with"
        " threads before isolated where the suite's pytest configuration sets"
        " --parallel-threads); isolated after parallel or threads runs only the files that"
        " did not pass there, isolated first runs them all",
    )
    check.add_argument("--serial-modes", action="store_true", help="one mode after another")
    explain = sub.add_parser(
        "explain",
        parents=[diff_parent, sanitize_parent],
        help="gather the evidence of a results directory: alone-runs, culprits, diagnoses",
        usage="gpuci explain OUT [options] [-- PYTEST_ARGS...]",
    )
    explain.add_argument("out", type=Path, metavar="OUT")
    explain.add_argument(
        "--reruns", type=_count, default=2, help="alone-runs per non-passing test, in all"
    )
    explain.add_argument("--timeout", type=_positive_float, help="most seconds one test may run")
    explain.add_argument(
        "--evidence-budget",
        type=_seconds,
        help="most seconds of evidence runs (default: what the suspects in OUT need, as check"
        " computes it)",
    )
    explain.add_argument("--python", default=sys.executable, help=argparse.SUPPRESS)
    return parser
