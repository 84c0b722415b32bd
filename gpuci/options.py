"""Options: one gpuci command, parsed, merged with `[tool.gpuci]`, and frozen.

`cli.py` parses the command line; `build_options` merges the suite's `[tool.gpuci]`
(`gpuci.config`) and builds one `Options`, where argparse's `Namespace` stops. Each stage
gets its own part, typed: the modes `ModeOptions` (`gpuci.run.sched.options`), the evidence
`EvidenceOptions`, the verdict `VerdictOptions`; the one-call stages (merge, report,
publish) their paths. Text the user gave (`--workers`, `--fail-on`) stays text and is
parsed where it always was, so that a mistake is refused at the same moment as before.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci.config import configure
from gpuci.model import Mode, UsageError
from gpuci.run.sched.options import ModeOptions
from gpuci.terminal import Terminal


@dataclass(frozen=True, slots=True, kw_only=True)
class EvidenceOptions:
    """How much evidence to gather after the modes: `run`, `check` and `explain`."""

    reruns: int = 2  # alone-runs per non-passing test
    # --evidence-budget; None: what the suspects need (check, explain), no limit (run)
    budget_s: float | None = None
    timeout: float | None = None  # most seconds one test may run
    sanitize: bool | None = None  # compute-sanitizer: on, off, or where it is found (None)
    python: str = sys.executable
    pytest_args: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class VerdictOptions:
    """How the diff judges: `diff`, `check` and `explain` (`run`: only `allow`, for skips)."""

    fail_on: str | None = None  # --fail-on, as given
    allow: str | None = None  # --allow, as given
    baseline: Path | None = None  # the target branch's verdict.json


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """One command's options; a stage's part is None where the command has no such stage."""

    command: str
    out: Path | None = None  # OUT: run, check, diff, explain
    modes: ModeOptions | None = None  # run, check
    mode: Mode | None = None  # run's --mode
    asked_modes: str | None = None  # check's --modes (or [tool.gpuci] modes), as given
    serial_modes: bool = False
    resume: bool = False
    evidence: EvidenceOptions | None = None  # run, check, explain
    verdict: VerdictOptions | None = None  # diff, check, explain
    # gpuci's own secrets and those [tool.gpuci] names, withheld from every child
    secrets: tuple[str, ...] = ()
    withheld: tuple[str, ...] = ()  # [tool.gpuci] secrets: the names to withhold
    inputs: tuple[Path, ...] = ()  # merge's JUnit files and directories
    output: Path | None = None  # merge's -o; diff's -o (default OUT/verdict.json)
    verdict_file: Path | None = None  # report's VERDICT.json
    html: Path | None = None  # report's --html
    markdown: Path | None = None  # report's --markdown
    comment: Path | None = None  # publish's COMMENT.md
    dry_run: bool = False  # publish's --dry-run
    terminal: Terminal = field(default_factory=Terminal)  # -q/-v, --color (where taken)

    @property
    def out_dir(self) -> Path:
        """OUT, which run, check, diff and explain always have."""
        if self.out is None:
            raise UsageError(f"gpuci {self.command} takes no OUT")
        return self.out


def build_options(args: argparse.Namespace) -> Options:
    """The command line (`args`, with `args.pytest_args`) merged with `[tool.gpuci]`."""
    given: dict[str, Any] = vars(args)
    config, settings = configure(
        args.command, given, paths=given.get("paths") or (), out=given.get("out")
    )

    def value(name: str) -> Any:
        setting = settings.get(name)
        return setting.value if setting is not None else given.get(name)

    asked: str | None = value("modes")  # as --modes spells them, or [tool.gpuci] joined
    python: str = given.get("python", sys.executable)
    pytest_args: tuple[str, ...] = given.get("pytest_args", ())
    mode_options = None
    if args.command in ("run", "check"):
        mode_options = ModeOptions(
            paths=tuple(args.paths),
            out=args.out,
            pytest_args=pytest_args,
            python=python,
            workers=value("workers"),
            timeout=value("timeout"),
            threads=value("threads"),
            reruns=value("reruns"),
            shard=args.shard,
            gpus=value("gpus"),
            gpus_per_slot=value("gpus_per_slot"),
            durations=args.durations,
            poison=args.poison,
            settings=settings,
        )
    evidence = None
    if args.command in ("run", "check", "explain"):
        evidence = EvidenceOptions(
            reruns=value("reruns"),
            budget_s=value("evidence_budget"),
            timeout=value("timeout"),
            sanitize=given.get("sanitize"),
            python=python,
            pytest_args=pytest_args,
        )
    verdict = None
    if args.command in ("run", "diff", "check", "explain"):
        verdict = VerdictOptions(
            fail_on=value("fail_on"), allow=value("allow"), baseline=given.get("baseline")
        )
    mode = given.get("mode")
    return Options(
        command=args.command,
        out=given.get("out"),
        modes=mode_options,
        mode=Mode(mode) if mode is not None else None,
        asked_modes=asked,
        serial_modes=given.get("serial_modes", False),
        resume=given.get("resume", False),
        evidence=evidence,
        verdict=verdict,
        withheld=config.secrets,
        inputs=tuple(given.get("inputs", ())),
        output=given.get("output"),
        verdict_file=given.get("verdict"),
        html=given.get("html"),
        markdown=given.get("markdown"),
        comment=given.get("comment"),
        dry_run=given.get("dry_run", False),
        terminal=Terminal(
            verbosity=given.get("verbose", 0) - given.get("quiet", 0),
            color=given.get("color", "auto"),
        ),
    )
