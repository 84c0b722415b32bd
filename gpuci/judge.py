"""The verdict as a command ends with it (`diff`, `check`, `explain`): OUT diffed into
verdict.json, or pytest's cause where its collection ended the check; the summary printed,
and the exit code that keeps pytest's contract: at least the plain run's exit status
(`gpuci.verdict.plain_run`), never green where pytest is red."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gpuci.options import Options
from gpuci.run.disk.masking import known_secrets, mask_secrets
from gpuci.run.proc.endings import no_test_ran
from gpuci.terminal import current


def write_verdict(options: Options, path: Path, *, ended: str = "", ended_code: int = 1) -> int:
    """Diff OUT into `path` (`diff`, `check`, `explain`), print the summary; the verdict's
    exit code. `ended`: pytest's cause where its collection ended the session, and no mode
    ran to diff (the verdict fails with it; warns where pytest exits 0, `ended_code`)."""
    from gpuci.report.summary import format_summary
    from gpuci.verdict.diff import diff_results, read_baseline
    from gpuci.verdict.diff import write_verdict as write_diffed
    from gpuci.verdict.ended import ended_verdict
    from gpuci.verdict.plain_run import at_least_as_red, check_exit_code, read_plain_run
    from gpuci.verdict.policy import parse_policy
    from gpuci.verdict.skips import ALLOW_HINT, nothing_ran

    judge = options.verdict
    assert judge is not None, options.command
    policy = parse_policy(judge.fail_on, judge.allow)
    baseline = read_baseline(judge.baseline) if judge.baseline else None
    secrets = known_secrets(os.environ, options.secrets)
    verdict = (
        ended_verdict(mask_secrets(ended, secrets), ended_code)
        if ended
        else diff_results(options.out_dir, baseline=baseline, policy=policy, secrets=secrets)
    )
    # the plain run's exit status first, in pytest's words: the verdict is at least as red
    plain = None if ended else read_plain_run(options.out_dir)
    verdict = at_least_as_red(verdict, plain)
    write_diffed(verdict, path, secrets)
    print(mask_secrets(format_summary(verdict, current(), sys.stdout), secrets))
    code = check_exit_code(3 if no_test_ran(verdict) else int(verdict.verdict == "fail"), plain)
    if plain is not None and plain.judged_by_diff and verdict.verdict != "fail":
        print(f"gpuci: {plain.reason()}: so does this check, exit 1", file=sys.stderr)
    if code == 3 and plain is None:
        print("gpuci: no test could run (pytest's own failure above): exit 3", file=sys.stderr)
    elif verdict.verdict == "fail" and nothing_ran(t.category for t in verdict.tests):
        print(f"gpuci: no test ran; {ALLOW_HINT}", file=sys.stderr)
    return code
