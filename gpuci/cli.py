"""The command line: `gpuci run | merge | diff | report | publish | check | explain`."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from gpuci import __version__
from gpuci.model import GpuciError, Mode, Outcome, UsageError, printable
from gpuci.options import Options, build_options
from gpuci.run.disk.masking import known_secrets, mask_secrets, masked_terminal, withhold_secrets

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
    parser = _Parser(prog="gpuci", description="Catch GPU test-isolation regressions in CI.")
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run gpuci; return its exit code (0 clean, 1 verdict failed, 2 usage, 3 infrastructure)."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first `--` belongs to pytest, untouched by argparse.
    pytest_args: list[str] = []
    if "--" in args_in:
        split = args_in.index("--")
        args_in, pytest_args = args_in[:split], args_in[split + 1 :]
    if not args_in:  # bare `gpuci`: what it can do, not one line about a missing command
        print(build_parser().format_help(), file=sys.stderr)
        return 2
    withheld: list[str] = []
    try:
        args = build_parser().parse_args(args_in)
        args.pytest_args = tuple(pytest_args)
        options = build_options(args)  # argparse's Namespace stops here
        # before any child starts: no test, discovery or evidence run sees gpuci's secrets
        if options.command != "publish":  # which needs its token, and starts no child
            withheld = withhold_secrets(os.environ, options.withheld)
            options = replace(options, secrets=tuple(withheld))
        handler = {
            "run": _cmd_run,
            "merge": _cmd_merge,
            "diff": _cmd_diff,
            "report": _cmd_report,
            "publish": _cmd_publish,
            "check": _cmd_check,
            "explain": _cmd_explain,
        }[options.command]
        # what a test printed reaches the terminal in a test id or a failure's line
        with masked_terminal(known_secrets(os.environ, withheld)):
            return handler(options)
    except GpuciError as exc:
        line = f"gpuci: {'error: ' if exc.exit_code != 130 else ''}{exc}"
        print(mask_secrets(line, known_secrets(os.environ, withheld)), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("gpuci: interrupted", file=sys.stderr)
        return 130


@contextlib.contextmanager
def _holding(out: Path, command: str, withheld: Sequence[str] = ()) -> Iterator[None]:
    """OUT's lock for the whole command: a second gpuci writing there exits 2; the files
    under OUT with every secret masked after it (`withheld` and those in the environment)."""
    from gpuci.run.disk.outdir import STATE_DIR, locked
    from gpuci.run.proc.ledger import close_ledger, open_ledger
    from gpuci.run.proc.strays import leftover_line

    notes: list[str] = []
    with locked(out, f"gpuci {command}", notes, known_secrets(os.environ, withheld)):
        for note in notes:
            print(f"gpuci: {note}", file=sys.stderr)
        # what a killed command on OUT left running (its ledger names it): ended, and said
        for left in open_ledger(out / STATE_DIR, f"gpuci {command}"):
            line = leftover_line("a gpuci command killed earlier", left, where=str(out))
            print(printable(f"gpuci: warning: {line}"), file=sys.stderr)
        try:
            yield
        finally:
            close_ledger(out / STATE_DIR)


def _adopt_orphans() -> None:
    """Make gpuci adopt what its interpreters leave behind (Linux), so it can end it."""
    from gpuci.run.proc.reaper import become_subreaper

    become_subreaper()  # elsewhere, each interpreter's process-group kill is what remains


@contextlib.contextmanager
def _interpreters() -> Iterator[None]:
    """Adopt orphans while the command runs."""
    _adopt_orphans()
    yield


def _cmd_run(options: Options) -> int:
    from gpuci.check import check_options, run_mode_with_reruns
    from gpuci.verdict.policy import parse_policy
    from gpuci.verdict.skips import ALLOW_HINT, nothing_ran_reason

    if options.serial_modes:
        raise UsageError(
            "--serial-modes: only for gpuci check; gpuci run runs one mode (--mode) already"
        )
    assert options.mode is not None
    check_options(options, options.mode)
    with _interpreters(), _holding(options.out_dir, "run", options.secrets):
        run = run_mode_with_reruns(options, options.mode)
    bad = sum(1 for t in run.tests if t.outcome not in (Outcome.PASSED, Outcome.SKIPPED))
    if bad:
        return 1
    # an xfail ran (pytest counts it skipped): only tests skipped outright ran nothing
    skips = [t.message for t in run.tests if t.outcome is Outcome.SKIPPED and not t.counted]
    assert options.verdict is not None
    if len(skips) == len(run.tests) and not parse_policy(None, options.verdict.allow).allow_skipped:
        print(f"gpuci: {printable(nothing_ran_reason(skips))}", file=sys.stderr)
        print(f"gpuci: {ALLOW_HINT}", file=sys.stderr)
        return 1
    return 0


def _cmd_merge(options: Options) -> int:
    from gpuci.verdict.merge import merge_junit

    assert options.output is not None
    summary = merge_junit(options.inputs, options.output)
    print(f"gpuci: merged {summary} -> {options.output}")
    return 0


def _cmd_diff(options: Options) -> int:
    from gpuci.judge import write_verdict

    out = options.out_dir
    path = options.output or out / "verdict.json"
    into_out = out.is_dir() and out.resolve() in path.resolve().parents
    with _holding(out, "diff") if into_out else contextlib.nullcontext():
        code = write_verdict(options, path)
    print(f"gpuci: wrote {path}")
    return code


def _cmd_report(options: Options) -> int:
    from gpuci.report.render import write_reports

    assert options.verdict_file is not None
    html, markdown = write_reports(
        options.verdict_file,
        html=options.html,
        markdown=options.markdown,
        environ=os.environ,
        secrets=options.secrets,
    )
    print(f"gpuci: report {html}, comment {markdown}")
    return 0


def _cmd_publish(options: Options) -> int:
    from gpuci.gitlab.publish import publish_comment

    assert options.comment is not None
    return publish_comment(options.comment, dry_run=options.dry_run, environ=os.environ)


def _cmd_explain(options: Options) -> int:
    from gpuci.check import explain_results
    from gpuci.judge import write_verdict

    out = options.out_dir
    if not out.is_dir():  # not made by the lock: a missing OUT is the user's mistake
        raise UsageError(f"{out}: no such directory; give the --out directory of `gpuci run`")
    with _interpreters(), _holding(out, "explain", options.secrets):
        explain_results(options)
        verdict_path = out / "verdict.json"
        code = write_verdict(options, verdict_path)
    print(f"gpuci: evidence {out / 'evidence'}, verdict {verdict_path}")
    return code


def _cmd_check(options: Options) -> int:
    from gpuci.check import check_options, run_check

    asked = check_options(options)
    with _interpreters(), _holding(options.out_dir, "check", options.secrets):
        code, html, markdown = run_check(options, asked)
    print(f"gpuci: verdict {options.out_dir / 'verdict.json'}, report {html}, comment {markdown}")
    print(f"gpuci: reproduce this check: {shlex.join(['gpuci', *sys.argv[1:]])}")
    return code
