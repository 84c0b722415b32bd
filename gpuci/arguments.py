"""The command line's grammar: `gpuci`'s subcommands, their options in --help's sections
(what to check, how, evidence, output, GitLab) and how each option's text is read (a
mistake is one `gpuci: error:` line, exit 4: pytest's usage error); `gpuci.cli` runs what
it parsed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn

from gpuci import __version__
from gpuci.model import Mode, UsageError
from gpuci.terminal import COLORS

DEFAULT_REPORT_HTML = "report.html"
DEFAULT_COMMENT_MD = "comment.md"


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError, so every mistake is one `gpuci: error:` line, and
    takes no abbreviated option, as pytest's: `--co` (pytest's --collect-only) is not
    gpuci's --color, nor `--time` its --timeout."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

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


Group = argparse._ArgumentGroup  # argparse's type of a --help section

EXIT_CODES = """\
exit codes:
  0  the plain pytest run exited 0 and the verdict passes
  1  the verdict failed, or the plain run exited 1
  2  interrupted: pytest's (a collection error), or Ctrl-C (--resume goes on)
  3  an internal error: pytest's INTERNALERROR, or gpuci's own
  4  a usage error: pytest's, or gpuci's
  5  no tests ran (pytest's)
  at least the plain pytest run's: pytest's own keep their meanings"""

EXAMPLES = """\
examples:
  gpuci check tests --out out                  the screens at once, evidence, verdict, report
  gpuci check tests --out out -- -k attention  pytest's own options after --
  gpuci check tests --out out -q               the verdict's headlines, not every file
  gpuci check tests --out out --durations cache/durations.json
                                               the longest files first (an earlier check's)
  gpuci check tests --out out --baseline target/verdict.json --allow known
                                               in a merge request: only new problems fail"""

RUN_EXAMPLES = """\
examples:
  gpuci run tests --mode parallel --out out    one mode: one CI job of several
  gpuci run tests --mode suite --out out --shard 1/4
  gpuci explain out                            then the evidence and the verdict of them all"""


SECTIONS = {  # --help's sections, in this order, each with what it is about
    "what to check": None,
    "how": None,
    "evidence": "the alone-runs and searches that decide each suspect",
    "output": None,
    "GitLab": "the verdict's policy; in a merge request, against the target branch's verdict",
}


def _sections(parser: argparse.ArgumentParser, *titles: str) -> dict[str, Group]:
    """`parser`'s --help sections (SECTIONS), by title, in the order given."""
    return {title: parser.add_argument_group(title, SECTIONS[title]) for title in titles}


def _add_paths(group: Group) -> None:
    group.add_argument("paths", nargs="+", metavar="PATH", help="test files or directories")
    group.add_argument(
        "--shard",
        metavar="I/N",
        help="run shard I of N, e.g. 1/4 (default: CI_NODE_INDEX/CI_NODE_TOTAL)",
    )


def _add_how(group: Group) -> None:
    """How the interpreters run: shared by `run` and `check`."""
    group.add_argument(
        "--workers", metavar="N", help="parallel interpreters: N or auto (default auto)"
    )
    group.add_argument(
        "--timeout", type=_positive_float, metavar="SECONDS", help="most seconds one test may run"
    )
    group.add_argument(
        "--gpus", metavar="LIST", help="GPUs every interpreter sees, e.g. 0,1 (default: all)"
    )
    group.add_argument(
        "--gpus-per-slot",
        type=_whole,
        metavar="N",
        help="give each parallel slot its own N GPUs (default: every slot sees all, rotated)",
    )
    group.add_argument(
        "--threads",
        type=_threads,
        metavar="N",
        help="threads mode: run each test in N threads at once (default: the suite's"
        " --parallel-threads where its pytest configuration sets one, else 4)",
    )
    group.add_argument(
        "--durations",
        type=Path,
        metavar="FILE",
        help="an earlier check's durations.json (or a run.json or results directory):"
        " the longest files start first",
    )
    group.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted OUT: keep what finished, run the rest",
    )
    group.add_argument("--python", default=sys.executable, help=argparse.SUPPRESS)


def _add_evidence(group: Group, *, default_budget: str) -> None:
    """The alone-runs and their budget: `run`, `check` and `explain`."""
    group.add_argument(
        "--reruns", type=_count, metavar="K", help="alone-reruns per non-passing test (default 2)"
    )
    group.add_argument(
        "--evidence-budget",
        type=_seconds,
        metavar="SECONDS",
        help=f"most seconds of evidence runs after the main passes (default: {default_budget})",
    )


def _add_poison(group: Group) -> None:
    group.add_argument(
        "--poison",
        action="store_true",
        help="fill every fresh CuPy or PyTorch allocation with 0xFF in every interpreter:"
        " a read of uninitialized device memory fails everywhere, alone too",
    )


def _add_sanitize(group: Group) -> None:
    group.add_argument(
        "--sanitize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rerun each root that crashed or failed with a CUDA error alone under"
        " compute-sanitizer memcheck (default: where compute-sanitizer is found)",
    )


def _add_terminal(group: Group) -> None:
    """-q, -v and --color, as pytest's: every command that prints progress or a verdict."""
    group.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more: each file's line names its tests that did not pass; the verdict lists"
        " every finding and victim, none cut",
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="count",
        default=0,
        help="less: no line per file or per evidence run, each finding its headline",
    )
    group.add_argument(
        "--color",
        choices=COLORS,
        default="auto",
        help="colour the output: yes, no, or auto (as pytest: on a terminal, unless NO_COLOR"
        " is set; FORCE_COLOR forces it)",
    )


def _add_policy(group: Group) -> None:
    """What fails the verdict: `diff`, `check` and `explain`."""
    group.add_argument(
        "--baseline",
        type=Path,
        metavar="VERDICT.json",
        help="the target branch's verdict.json: each isolation problem is new or known",
    )
    group.add_argument(
        "--fail-on",
        metavar="CATEGORIES",
        help="categories that fail the verdict (comma list); 'latent': a finding only an order"
        " plain pytest did not run showed (reversed, shuffled) fails too, not only warns",
    )
    group.add_argument(
        "--allow", metavar="CATEGORIES", help="categories (or 'known') that never fail it"
    )


def _add_check(sub: argparse._SubParsersAction[_Parser]) -> None:
    check = sub.add_parser(
        "check",
        help="the modes at once, the evidence, the verdict and the report, in one",
        description="Run a suite as plain pytest would and in fresh interpreters beside it,"
        " diff every test's outcome, gather the evidence, write the verdict and the report.",
        usage="gpuci check PATHS... --out OUT [options] [-- PYTEST_ARGS...]",
        epilog=f"{EXAMPLES}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    groups = _sections(check, "what to check", "how", "evidence", "output", "GitLab")
    _add_paths(groups["what to check"])
    groups["what to check"].add_argument(
        "--modes",
        metavar="LIST",
        help="modes to run, in order (comma list; default suite,parallel,isolated, with"
        " threads before isolated where the suite's pytest configuration sets"
        " --parallel-threads, and reversed after suite with two or more GPUs); isolated after"
        " parallel or threads runs only the files that did not pass there, isolated first"
        " runs them all; reversed runs the files in reverse collection order in one"
        " interpreter beside the suite's, shuffled (or shuffled:SEED) in a seeded shuffle",
    )
    _add_how(groups["how"])
    groups["how"].add_argument("--serial-modes", action="store_true", help="one mode after another")
    _add_evidence(
        groups["evidence"],
        default_budget="what the isolation suspects need, from the main passes' times:"
        " alone-runs, a poisoned run, a culprit search, a compute-sanitizer block each, and"
        " 3 alone-runs per group of identical failures; x1.5, at most 1800 s",
    )
    _add_poison(groups["evidence"])
    _add_sanitize(groups["evidence"])
    groups["output"].add_argument("--out", required=True, type=Path, help="results directory")
    _add_terminal(groups["output"])
    _add_policy(groups["GitLab"])


def _add_run(sub: argparse._SubParsersAction[_Parser]) -> None:
    run = sub.add_parser(
        "run",
        help="run a suite in one mode (one CI job per mode; then explain)",
        usage="gpuci run PATHS... --mode MODE --out OUT [options] [-- PYTEST_ARGS...]",
        epilog=f"{RUN_EXAMPLES}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    groups = _sections(run, "what to check", "how", "evidence", "output")
    _add_paths(groups["what to check"])
    groups["what to check"].add_argument("--mode", required=True, choices=[m.value for m in Mode])
    groups["what to check"].add_argument(
        "--allow", help="'skipped': a run where every test skipped passes (default: it fails)"
    )
    _add_how(groups["how"])
    # check's alone: parsed here too, so that `gpuci run --serial-modes` is told why not
    run.add_argument("--serial-modes", action="store_true", help=argparse.SUPPRESS)
    _add_evidence(groups["evidence"], default_budget="no limit")
    _add_poison(groups["evidence"])
    groups["output"].add_argument("--out", required=True, type=Path, help="results directory")
    _add_terminal(groups["output"])


def _add_explain(sub: argparse._SubParsersAction[_Parser]) -> None:
    explain = sub.add_parser(
        "explain",
        help="gather the evidence of a results directory: alone-runs, culprits, diagnoses",
        usage="gpuci explain OUT [options] [-- PYTEST_ARGS...]",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    explain.add_argument("out", type=Path, metavar="OUT", help="the --out of `gpuci run`")
    groups = _sections(explain, "evidence", "output", "GitLab")
    evidence = groups["evidence"]
    evidence.add_argument(
        "--reruns",
        type=_count,
        default=2,
        metavar="K",
        help="alone-runs per non-passing test, in all",
    )
    evidence.add_argument(
        "--timeout", type=_positive_float, metavar="SECONDS", help="most seconds one test may run"
    )
    evidence.add_argument(
        "--evidence-budget",
        type=_seconds,
        metavar="SECONDS",
        help="most seconds of evidence runs (default: what the suspects in OUT need, as check"
        " computes it)",
    )
    _add_sanitize(evidence)
    evidence.add_argument("--python", default=sys.executable, help=argparse.SUPPRESS)
    _add_terminal(groups["output"])
    _add_policy(groups["GitLab"])


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, with one subcommand per stage, `check` first."""
    parser = _Parser(
        prog="gpuci",
        description="Catch GPU test-isolation regressions in CI: run a suite as plain pytest"
        " would and in fresh interpreters, one at a time, side by side and in threads; diff"
        " every test's outcome; say which tests are isolation problems, real failures or"
        " flaky, and who polluted whom.",
        epilog=f"{EXAMPLES}\n\n{EXIT_CODES}\n\n`gpuci COMMAND --help` for each command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpuci {__version__}")
    sub = parser.add_subparsers(
        dest="command", required=True, parser_class=_Parser, title="commands", metavar="COMMAND"
    )
    _add_check(sub)
    _add_run(sub)
    _add_explain(sub)

    diff = sub.add_parser("diff", help="classify every test: verdict.json")
    diff.add_argument("out", type=Path, metavar="OUT")
    diff.add_argument("-o", "--output", type=Path, help="default: OUT/verdict.json")
    diff_groups = _sections(diff, "output", "GitLab")
    _add_terminal(diff_groups["output"])
    _add_policy(diff_groups["GitLab"])

    merge = sub.add_parser("merge", help="merge JUnit XML of files, shards and modes")
    merge.add_argument("inputs", nargs="+", type=Path, metavar="INPUT")
    merge.add_argument("-o", "--output", required=True, type=Path)

    report = sub.add_parser("report", help="render the HTML report and the MR comment")
    report.add_argument("verdict", type=Path, metavar="VERDICT.json")
    report.add_argument("--html", type=Path, help=f"default: {DEFAULT_REPORT_HTML} beside it")
    report.add_argument("--markdown", type=Path, help=f"default: {DEFAULT_COMMENT_MD} beside it")

    publish = sub.add_parser("publish", help="create or update the merge-request note")
    publish.add_argument("comment", type=Path, metavar="COMMENT.md")
    publish.add_argument("--dry-run", action="store_true", help="say what would be posted")
    return parser


def gpuci_options(parser: argparse.ArgumentParser, command: str) -> frozenset[str]:
    """The options `command` takes (`--out`, `-q`...), `gpuci`'s own where it is no command."""
    options = set(parser._option_string_actions)  # argparse keeps no public list of them
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            options |= set(action.choices[command]._option_string_actions)
    return frozenset(options)
