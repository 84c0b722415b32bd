"""(f): `gpuci check` against a plain `python -m pytest tests`, on the generated suite as it
is (clean) and on a copy with planted failures (polluted), measured and reported."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchlib import TESTS_DIR, Samples, run_timed, say, shown, verdict_word
from check_plants import (
    CHECK_MIN_FILES,
    Plant,
    as_planted,
    expected_summary,
    plant_failures,
    reset_plants,
)
from gensuite import generate_suite

TARGET_CHECK_CLEAN = 1.5  # gpuci check / plain pytest, a suite with nothing wrong in it
TARGET_CHECK_POLLUTED = 2.5  # the same with planted failures: their evidence costs more
SCREENS = ("suite", "parallel", "threads")  # the passes a check runs at once


@dataclass(slots=True)
class CheckResults:
    """(f): plain pytest and gpuci check on the clean and the polluted suite, every repetition."""

    clean_pytest: Samples
    clean_check: Samples
    polluted_pytest: Samples
    polluted_check: Samples
    clean_serial: Samples  # gpuci check --serial-modes: one mode after another, as before
    polluted_serial: Samples
    plants: list[Plant]
    expected: dict[str, int]
    clean_outs: list[dict[str, Any]] = field(default_factory=list)
    polluted_outs: list[dict[str, Any]] = field(default_factory=list)


def read_check_out(out: Path, exit_code: int) -> dict[str, Any]:
    """What one `gpuci check` wrote: its verdict, summary, where its time went, planted ids."""
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    evidence = verdict.get("evidence") or {}
    modes = verdict.get("modes", {})
    # The verdict lists the modes in gpuci's own order, the check ran them in its --modes
    # order: each run.json's started_at gives it (to the second; a tie keeps the verdict's).
    ran = sorted(modes, key=lambda mode: started_at(out / mode / "run.json"))
    return {
        "exit_code": exit_code,
        "verdict": verdict.get("verdict"),
        "summary": {k: v for k, v in verdict.get("summary", {}).items() if v},
        "modes_s": {m: d.get("wall_s", 0.0) for m, d in modes.items()},
        "modes_run": ran,
        "evidence_s": evidence.get("spent_s"),
        "evidence_runs": evidence.get("runs"),
        "evidence_concurrency": evidence.get("concurrency", {}),
        "categories": {
            t["id"]: t.get("category")
            for t in verdict.get("tests", [])
            if "::test_plant_" in t["id"]
        },
    }


def started_at(run_json: Path) -> str:
    """A mode's start (ISO 8601, UTC) from its run.json; "" where there is none."""
    try:
        return str(json.loads(run_json.read_text(encoding="utf-8")).get("started_at", ""))
    except (OSError, ValueError):
        return ""


def measure_check(
    work: Path,
    *,
    files: int,
    tests: int,
    seed: int,
    min_ms: float,
    max_ms: float,
    workers: int,
    repeat: int,
) -> CheckResults:
    """Measure (f) `repeat` times, interleaved: plain pytest and gpuci check, clean and polluted."""
    py = sys.executable
    clean, polluted = work / "check-clean", work / "check-polluted"
    # The same seeded suite twice; the planted tests go into the second copy only.
    for root in (clean, polluted):
        planned = generate_suite(
            root, files=files, tests=tests, seed=seed, min_ms=min_ms, max_ms=max_ms
        )
    plants = plant_failures(polluted, list(planned), seed=seed, workers=workers)
    say(f"(f) suites: {clean} and {polluted} ({len(plants)} planted tests)")
    pytest_cmd = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", TESTS_DIR]
    collect_cmd = [*pytest_cmd[:-1], "--collect-only", TESTS_DIR]

    def check_cmd(out: Path, *more: str) -> list[str]:
        cmd = [py, "-m", "gpuci", "check", TESTS_DIR, "--out", str(out), "--workers", str(workers)]
        return cmd + list(more)

    serial = "--serial-modes"

    def out_of(r: int, kind: str) -> Path:
        return work / f"check-out-{r + 1}" / kind

    results = CheckResults(
        clean_pytest=Samples(shown(pytest_cmd, clean)),
        clean_check=Samples(shown(check_cmd(out_of(0, "clean")), clean)),
        polluted_pytest=Samples(shown(pytest_cmd, polluted)),
        polluted_check=Samples(shown(check_cmd(out_of(0, "polluted")), polluted)),
        clean_serial=Samples(shown(check_cmd(out_of(0, "clean-serial"), serial), clean)),
        polluted_serial=Samples(shown(check_cmd(out_of(0, "polluted-serial"), serial), polluted)),
        plants=plants,
        expected=expected_summary(plants, files * tests + len(plants)),
    )
    logs = work / "logs"
    # Warm-up, as for (a)-(e): assertion rewriting caches each module's bytecode once.
    for root in (clean, polluted):
        run_timed(collect_cmd, cwd=root, log=logs / f"check-warmup-{root.name}.log")
    for r in range(repeat):
        tag = f"[{r + 1}/{repeat}]"
        say(f"{tag} (f) plain pytest, clean suite")
        results.clean_pytest.add(
            run_timed(pytest_cmd, cwd=clean, log=logs / f"check-pytest-clean-{r}.log")
        )
        say(f"{tag} (f) gpuci check --workers {workers}, clean suite")
        out = out_of(r, "clean")
        # 1 is a failed verdict, a finding in a clean suite; anything else is a broken check
        measure = run_timed(
            check_cmd(out), cwd=clean, log=logs / f"check-clean-{r}.log", allow=(0, 1)
        )
        results.clean_check.add(measure)
        results.clean_outs.append(read_check_out(out, measure.exit_code))
        say(f"{tag} (f) gpuci check --workers {workers} {serial}, clean suite")
        results.clean_serial.add(
            run_timed(
                check_cmd(out_of(r, "clean-serial"), serial),
                cwd=clean,
                log=logs / f"check-clean-serial-{r}.log",
                allow=(0, 1),
            )
        )

        say(f"{tag} (f) plain pytest, polluted suite")
        reset_plants(polluted)
        results.polluted_pytest.add(
            run_timed(
                pytest_cmd, cwd=polluted, log=logs / f"check-pytest-polluted-{r}.log", allow=(0, 1)
            )
        )
        say(f"{tag} (f) gpuci check --workers {workers}, polluted suite")
        reset_plants(polluted)
        out = out_of(r, "polluted")
        measure = run_timed(
            check_cmd(out), cwd=polluted, log=logs / f"check-polluted-{r}.log", allow=(0, 1)
        )
        results.polluted_check.add(measure)
        results.polluted_outs.append(read_check_out(out, measure.exit_code))
        say(f"{tag} (f) gpuci check --workers {workers} {serial}, polluted suite")
        reset_plants(polluted)
        results.polluted_serial.add(
            run_timed(
                check_cmd(out_of(r, "polluted-serial"), serial),
                cwd=polluted,
                log=logs / f"check-polluted-serial-{r}.log",
                allow=(0, 1),
            )
        )
    return results


def check_report(
    results: CheckResults, workers: int, startup_s: float | None
) -> tuple[list[str], dict[str, Any], bool]:
    """The lines of (f), the same numbers for JSON, and whether both targets held."""
    clean_ratio = results.clean_check.wall / results.clean_pytest.wall
    polluted_ratio = results.polluted_check.wall / results.polluted_pytest.wall
    ok = clean_ratio <= TARGET_CHECK_CLEAN and polluted_ratio <= TARGET_CHECK_POLLUTED
    check = f"(f) gpuci check --workers {workers}"
    planted = len(results.plants)
    lines = [
        f"{'measurement':<44} {'median s':>9} {'CPU s':>7}  {'ratio':<22} {'target':<8}",
        f"{'(f) plain pytest, clean suite':<44} {results.clean_pytest.wall:>9.2f}"
        f" {results.clean_pytest.cpu:>7.2f}",
        f"{check + ', clean':<44} {results.clean_check.wall:>9.2f}"
        f" {results.clean_check.cpu:>7.2f}  {clean_ratio:>6.3f} check/pytest    "
        f"<= {TARGET_CHECK_CLEAN:<5} {verdict_word(clean_ratio, TARGET_CHECK_CLEAN)}",
        f"{f'(f) plain pytest, polluted ({planted} planted)':<44}"
        f" {results.polluted_pytest.wall:>9.2f} {results.polluted_pytest.cpu:>7.2f}",
        f"{check + ', polluted':<44} {results.polluted_check.wall:>9.2f}"
        f" {results.polluted_check.cpu:>7.2f}  {polluted_ratio:>6.3f} check/pytest    "
        f"<= {TARGET_CHECK_POLLUTED:<5} {verdict_word(polluted_ratio, TARGET_CHECK_POLLUTED)}",
    ]
    for kind, pytest_s, samples in (
        ("clean", results.clean_pytest, results.clean_serial),
        ("polluted", results.polluted_pytest, results.polluted_serial),
    ):  # the same run's plain pytest: the screens' gain over one mode after another
        lines.append(
            f"{check + ' --serial-modes, ' + kind:<44} {samples.wall:>9.2f} {samples.cpu:>7.2f}"
            f"  {samples.wall / pytest_s.wall:>6.3f} check/pytest    (the screens: "
            f"{(results.clean_check if kind == 'clean' else results.polluted_check).wall:.2f}s)"
        )
    floor, floor_data = check_floor(results, startup_s)
    lines += [floor, ""]
    for kind, samples, outs in (
        ("clean", results.clean_check, results.clean_outs),
        ("polluted", results.polluted_check, results.polluted_outs),
    ):
        lines.append(f"where the {kind} check goes: {time_split(samples.wall, outs)}")
    lines += [evidence_line(r, out) for r, out in enumerate(results.polluted_outs)]
    found = [out["summary"] for out in results.polluted_outs]
    matches = [
        as_planted(results.plants, out["categories"], out["summary"])
        for out in results.polluted_outs
    ]
    lines += [
        f"planted:       {format_counts(results.expected)}",
        f"found:         {format_counts(found[0])}  (verdict {results.polluted_outs[0]['verdict']},"
        f" exit {results.polluted_outs[0]['exit_code']})",
    ]
    lines += [
        f"  repetition {r + 1}: {format_counts(summary)}"
        for r, summary in enumerate(found)
        if r and summary != found[0]
    ]
    lines.append(
        f"categories as planted: {sum(matches)} of {len(matches)} repetition(s)"
        + ("" if all(matches) else " (see the tests below)")
    )
    # Every planted test, and what each repetition made of it.
    for plant in sorted(results.plants, key=lambda p: p.id):
        got = [out["categories"].get(plant.id, "missing") for out in results.polluted_outs]
        expect = plant.expect.replace("concurrency?", "concurrency, flaky or passed")
        lines.append(f"  {plant.id:<58} planted {expect:<22} found {', '.join(got)}")
    clean_found = [out["summary"] for out in results.clean_outs]
    clean_exits = [out["exit_code"] for out in results.clean_outs]
    lines.append(
        f"clean suite:   {format_counts(clean_found[0])}  (exit {', '.join(map(str, clean_exits))};"
        " expected 0)"
    )
    commands = {
        "(f) pytest": results.clean_pytest.command,
        "(f) check": results.clean_check.command,
        "(f) pytest pol": results.polluted_pytest.command,
        "(f) check pol": results.polluted_check.command,
    }
    lines += ["", "commands (each repetition uses its own --out):"]
    lines += [f"  {k:<16}{v}" for k, v in commands.items()]
    data: dict[str, Any] = {
        "repeat": len(results.clean_check.walls),
        "workers": workers,
        "clean_pytest_s": results.clean_pytest.wall,
        "clean_check_s": results.clean_check.wall,
        "clean_ratio": clean_ratio,
        "clean_target": TARGET_CHECK_CLEAN,
        "polluted_pytest_s": results.polluted_pytest.wall,
        "polluted_check_s": results.polluted_check.wall,
        "polluted_ratio": polluted_ratio,
        "polluted_target": TARGET_CHECK_POLLUTED,
        "floor": floor_data,
        "samples": {
            "clean_pytest": results.clean_pytest.walls,
            "clean_check": results.clean_check.walls,
            "polluted_pytest": results.polluted_pytest.walls,
            "polluted_check": results.polluted_check.walls,
        },
        "cpu_s": {
            "clean_pytest": results.clean_pytest.cpu,
            "clean_check": results.clean_check.cpu,
            "polluted_pytest": results.polluted_pytest.cpu,
            "polluted_check": results.polluted_check.cpu,
        },
        "planted": [asdict(p) for p in results.plants],
        "expected_summary": results.expected,
        "summary_matches": matches,
        "clean_runs": results.clean_outs,
        "polluted_runs": results.polluted_outs,
        "commands": commands,
    }
    return lines, data, ok


def evidence_line(repetition: int, out: dict[str, Any]) -> str:
    """What one polluted check's evidence ran: its runs, how many at once, its wall."""
    at_once = out.get("evidence_concurrency") or {}
    return (
        f"evidence, polluted repetition {repetition + 1}: {out.get('evidence_runs') or 0} runs,"
        f" up to {at_once.get('most_at_once', 1)} at once of {at_once.get('slots', 1)} slots"
        f" ({at_once.get('beside', 0)} beside another), wall {out.get('evidence_s') or 0.0:.1f}s"
    )


def check_floor(results: CheckResults, startup_s: float | None) -> tuple[str, dict[str, Any]]:
    """The least the clean check can take against plain pytest, as a line and for JSON.

    The screens (suite, parallel, threads) run at once: the longest of them; what runs
    after them (the lazy isolated pass) adds to it. The suite screen is about one plain
    pytest run, so the clean check/pytest cannot go below that over plain pytest.
    """
    passes = mode_medians(results.clean_outs, ordered_by="modes_run")
    screens = {m: s for m, s in passes.items() if m in SCREENS}
    after = {m: s for m, s in passes.items() if m not in SCREENS}
    total = max(screens.values(), default=0.0) + sum(after.values())
    pytest_s = results.clean_pytest.wall
    line = (
        "floor of the clean check: the longest screen of "
        + ", ".join(f"{mode} {seconds:.2f} s" for mode, seconds in screens.items())
        + "".join(f" + {mode} pass {seconds:.2f} s" for mode, seconds in after.items())
        + f" = {total / pytest_s:.2f}x plain pytest: check/pytest cannot go below it"
    )
    if startup_s is not None:
        line += f"; per-file start-up ~{startup_s:.2f} s ((a) less planned sleep)"
    data = {
        "passes_s": passes,
        "passes_sum_s": total,
        "ratio": total / pytest_s,
        "per_file_startup_s": startup_s,
    }
    return line, data


def mode_medians(outs: Sequence[dict[str, Any]], ordered_by: str = "modes_s") -> dict[str, float]:
    """Each mode's median wall over the checks, in the order of each check's `ordered_by`."""
    modes: dict[str, list[float]] = {}
    for out in outs:
        for mode in out[ordered_by]:
            modes.setdefault(mode, []).append(out["modes_s"][mode])
    return {mode: statistics.median(v) for mode, v in modes.items()}


def time_split(wall: float, outs: Sequence[dict[str, Any]]) -> str:
    """The check's median wall, split into its modes, its evidence and the rest."""
    parts = mode_medians(outs)
    evidence = [out["evidence_s"] for out in outs if out["evidence_s"] is not None]
    if evidence:
        runs = statistics.median(out["evidence_runs"] or 0 for out in outs)
        parts[f"evidence ({runs:g} runs)"] = statistics.median(evidence)
    screens = [s for m, s in parts.items() if m in SCREENS]  # at once: the longest counts
    rest = wall - sum(s for m, s in parts.items() if m not in SCREENS) - max(screens, default=0)
    text = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in parts.items())
    return f"{text}; the rest (start-up, discovery, diff, report) {rest:.2f} s"


def format_counts(summary: dict[str, int]) -> str:
    """A verdict summary as `passed 120, failed 1, ...`, passed first."""
    keys = sorted(summary, key=lambda k: (k != "passed", k))
    return ", ".join(f"{k} {summary[k]}" for k in keys) or "(nothing)"


def check_section(
    work: Path, args: argparse.Namespace, startup_s: float | None
) -> tuple[list[str], Any, bool]:
    """(f) measured and reported: its lines, its JSON (None when skipped), its targets held.

    `startup_s` is a bare pytest's per-file start-up from (a), None where (a) did not run.
    """
    if args.files < CHECK_MIN_FILES:
        return [f"(f) not measured: it needs --files {CHECK_MIN_FILES} or more"], None, True
    check = measure_check(
        work,
        files=args.files,
        tests=args.tests,
        seed=args.seed,
        min_ms=args.min_ms,
        max_ms=args.max_ms,
        workers=args.workers,
        repeat=args.repeat,
    )
    lines, data, ok = check_report(check, args.workers, startup_s)
    header = (
        f"gpuci check against plain pytest: {args.files} files x {args.tests} tests,"
        f" W={args.workers}, {args.repeat} repetition(s)"
    )
    return [header, "", *lines], data, ok
