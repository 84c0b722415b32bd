"""The command line: `gpuci run | merge | diff | report | publish | check | explain`."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from gpuci import shell
from gpuci.arguments import build_parser, gpuci_options
from gpuci.model import GpuciError, Mode, Outcome, UsageError, printable
from gpuci.options import Options, build_options
from gpuci.run.disk.masking import known_secrets, mask_secrets, masked_terminal, withhold_secrets
from gpuci.run.proc.supervisor import noting_interrupts
from gpuci.terminal import Terminal, using

INTERRUPTED_EXIT = 2  # pytest's, for an interrupted session
RESUMABLE = ("check", "run")  # the commands that take --resume


def main(argv: Sequence[str] | None = None) -> int:
    """Run gpuci; return its exit code: 0 the verdict passed (and the plain pytest run exited
    0), 1 the verdict failed (or the plain run exited 1), 2 interrupted (pytest's, or Ctrl-C),
    3 pytest's internal error or gpuci's own (an unreadable input, GitLab refused), 4 a
    usage error (pytest's, or gpuci's), 5 no tests ran (pytest's); `gpuci --help` too."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first `--` belongs to pytest, untouched by argparse.
    pytest_args: list[str] = []
    if "--" in args_in:
        split = args_in.index("--")
        args_in, pytest_args = args_in[:split], args_in[split + 1 :]
    if not args_in:  # bare `gpuci`: what it can do, not one line about a missing command
        print(build_parser().format_help(), file=sys.stderr)
        return UsageError.exit_code
    withheld: list[str] = []
    terminal = Terminal()  # until the command line has said how it wants its output
    try:
        args = _parse(args_in, pytest_args)
        options = build_options(args)  # argparse's Namespace stops here
        terminal = options.terminal
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
        with (
            masked_terminal(known_secrets(os.environ, withheld)),
            noting_interrupts(),
            using(terminal),
        ):
            return handler(options)
    except GpuciError as exc:
        interrupted = _interrupted(exc)
        # exit 0: pytest ended the session green by itself (a hook's pytest.exit), no error
        no_error = interrupted or exc.exit_code == 0
        error = "" if no_error else terminal.paint("error:", "red", sys.stderr) + " "
        line = f"gpuci: {error}{exc}"
        print(mask_secrets(line, known_secrets(os.environ, withheld)), file=sys.stderr)
        if interrupted:
            _say_how_to_resume(args_in, pytest_args)
        return exc.exit_code
    except KeyboardInterrupt:
        print("gpuci: interrupted", file=sys.stderr)
        _say_how_to_resume(args_in, pytest_args)
        return INTERRUPTED_EXIT


def _interrupted(exc: GpuciError) -> bool:
    from gpuci.run.sched.session import Interrupted

    return isinstance(exc, Interrupted)


def _say_how_to_resume(args: Sequence[str], pytest_args: Sequence[str]) -> None:
    """After Ctrl-C: the command that goes on from where it stopped (`check`, `run`)."""
    if not args or args[0] not in RESUMABLE:
        return
    again = ["gpuci", *args, *([] if "--resume" in args else ["--resume"])]
    again += ["--", *pytest_args] if pytest_args else []
    print(f"gpuci: to go on from there: {shell.join(again)}", file=sys.stderr)


def _parse(args_in: list[str], pytest_args: list[str]) -> argparse.Namespace:
    """The command line parsed; where it holds pytest's options before `--`, the error that
    says so (argparse would say only "unrecognized arguments", or that --out is missing)."""
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(args_in)
    except UsageError as refused:
        hint = _pytest_hint(parser, args_in, pytest_args)
        raise (UsageError(hint) if hint else refused) from None
    if unknown:
        hint = _pytest_hint(parser, args_in, pytest_args)
        raise UsageError(hint or f"unrecognized arguments: {shell.join(unknown)}")
    args.pytest_args = tuple(pytest_args)
    return args


def _pytest_hint(
    parser: argparse.ArgumentParser, args_in: list[str], pytest_args: list[str]
) -> str | None:
    """The error for pytest's options given before `--`, where there are any (pytest is
    asked which options it has only here, on the way to an error)."""
    from gpuci.pytest_options import ask_pytest, misplaced_hint, option_name

    takes = gpuci_options(parser, args_in[0]).__contains__
    if all(not a.startswith("-") or takes(option_name(a)) for a in args_in):
        return None  # no option gpuci does not take: pytest has nothing to say
    return misplaced_hint(args_in, pytest_args, takes, ask_pytest())


@contextlib.contextmanager
def _holding(out: Path, command: str, withheld: Sequence[str] = ()) -> Iterator[None]:
    """OUT's lock for the whole command: a second gpuci writing there exits 4; the files
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
    from gpuci.verdict.plain_run import check_exit_code, read_plain_run
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
    # the suite mode is the plain pytest run: its exit status is the floor of this one's
    plain = read_plain_run(options.out_dir) if options.mode is Mode.SUITE else None
    if plain is not None:
        print(f"gpuci: {printable(plain.reason())}", file=sys.stderr)
    bad = sum(1 for t in run.tests if t.outcome not in (Outcome.PASSED, Outcome.SKIPPED))
    if bad or plain is not None:
        return check_exit_code(int(bad > 0), plain)
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
    print(f"gpuci: reproduce this check: {shell.join(['gpuci', *sys.argv[1:]])}")
    return code
