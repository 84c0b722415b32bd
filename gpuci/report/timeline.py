"""The report's picture of time: the parallel run as an SVG timeline, per-file durations."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpuci.model import FileStatus, Mode, Verdict
from gpuci.run.proc.strays import verdict_lines
from gpuci.run.sched.pace import pace_line

TIMELINE_WIDTH = 1000.0  # SVG user units of the plot area
TIMELINE_LABEL = 170.0
TIMELINE_ROW = 22.0
TIMELINE_AXIS = 26.0


def file_runs(mode: Any) -> list[Mapping[str, Any]]:
    """A mode's `file_runs`, keeping only well-formed entries."""
    if not isinstance(mode, Mapping):
        return []
    runs = mode.get("file_runs")
    if not isinstance(runs, list):
        return []
    return [r for r in runs if isinstance(r, Mapping) and isinstance(r.get("file"), str)]


def number(value: Any, default: float = 0.0) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def status_class(value: Any) -> str:
    """A file status we have a colour for, `unknown` otherwise (it names a CSS class)."""
    statuses = {s.value for s in FileStatus}
    return value if isinstance(value, str) and value in statuses else "unknown"


def seconds(value: float) -> str:
    if value >= 120:
        return f"{int(value // 60)}m{value % 60:04.1f}s"
    return f"{value:.2f}s" if value < 10 else f"{value:.1f}s"


def ticks(end: float) -> list[float]:
    """About six round tick values from 0 to `end` seconds."""
    if end <= 0:
        return [0.0]
    raw = end / 6
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [i * step for i in range(int(end // step) + 1)]


def timeline(verdict: Verdict) -> dict[str, Any] | None:
    """The parallel run as rows of bars, in SVG user units; None without a parallel run."""
    mode = verdict.modes.get(Mode.PARALLEL.value)
    if not file_runs(mode):
        return None
    # the modes screened beside it shared its slots and its clock: the suite interpreter's
    # slot is one of the workers, drawn with them
    beside = mode.get("beside") if isinstance(mode, Mapping) else None
    drawn = [Mode.PARALLEL.value, *(m for m in beside or () if isinstance(m, str))]
    runs = [{**r, "mode": m} for m in drawn for r in file_runs(verdict.modes.get(m))]
    shards = {r.get("shard") for r in runs}

    def lane(run: Mapping[str, Any]) -> tuple[str, str, int]:
        shard = "" if len(shards) < 2 else str(run.get("shard") or "")
        gpu = run.get("gpu")
        return (shard, "" if gpu is None else str(gpu), int(number(run.get("slot"))))

    lanes = sorted({lane(r) for r in runs}, key=lambda k: (k[0].zfill(6), k[1].zfill(6), k[2]))
    index = {key: i for i, key in enumerate(lanes)}
    only_suite = {
        key: all(r["mode"] == Mode.SUITE.value for r in runs if lane(r) == key) for key in lanes
    }
    # The axis ends with the last file: the alone-reruns after it are not drawn.
    end = max(number(r.get("end")) for r in runs) or 1.0
    wall = number(mode.get("wall_s")) if isinstance(mode, Mapping) else 0.0
    # the axis starts before 0 where the suite interpreter started before the screens
    # (`gpuci.run.proc.held`: it collected beside discovery)
    origin = min(0.0, *(number(r.get("start")) for r in runs))
    scale = TIMELINE_WIDTH / (end - origin)
    rows = []
    previous_group = None
    for i, (shard, gpu, slot) in enumerate(lanes):
        group = " · ".join(
            p for p in (f"shard {shard}" if shard else "", f"GPU {gpu}" if gpu else "") if p
        )
        rows.append(
            {
                "y": i * TIMELINE_ROW,
                "text_y": i * TIMELINE_ROW + TIMELINE_ROW / 2 + 4,
                "label": f"slot {slot}" + (" (suite)" if only_suite[lanes[i]] else ""),
                "group": group if group != previous_group else "",
                "separator": i > 0 and group != previous_group,
            }
        )
        previous_group = group
    bars = []
    for run in sorted(runs, key=lambda r: number(r.get("start"))):
        start, stop = number(run.get("start")), number(run.get("end"))
        status = status_class(run.get("status"))
        bars.append(
            {
                "x": round(TIMELINE_LABEL + (start - origin) * scale, 2),
                "y": index[lane(run)] * TIMELINE_ROW + 3,
                "width": round(max((stop - start) * scale, 1.5), 2),
                "status": status,
                "title": ("" if run["mode"] == Mode.PARALLEL.value else f"{run['mode']}: ")
                + f"{run['file']} — {status}, {seconds(start)} → {seconds(stop)}"
                f" ({seconds(stop - start)})",
            }
        )
    height = len(lanes) * TIMELINE_ROW
    return {
        "width": TIMELINE_LABEL + TIMELINE_WIDTH + 20,
        "height": height + TIMELINE_AXIS,
        "plot_height": height,
        "label_x": TIMELINE_LABEL - 8,
        "tick_y": height + 16,
        "row_height": TIMELINE_ROW - 6,
        "rows": rows,
        "bars": bars,
        "ticks": [
            {"x": round(TIMELINE_LABEL + (t - origin) * scale, 2), "label": seconds(t)}
            for t in ticks(end)
        ],
        "statuses": sorted({b["status"] for b in bars}),
        "wall": seconds(max(wall, end)),
        "workers": mode.get("workers") if isinstance(mode, Mapping) else None,
    }


def durations(verdict: Verdict, columns: Sequence[str]) -> dict[str, Any]:
    """Per file, its duration and status in each mode, slowest file first."""
    table: dict[str, dict[str, tuple[float, str]]] = {}
    for mode in columns:
        for run in file_runs(verdict.modes.get(mode)):
            if run.get("inferred"):  # the mode never ran it: it has no time of its own
                continue
            start, stop = number(run.get("start")), number(run.get("end"))
            duration = number(run.get("duration"), stop - start)
            before = table.setdefault(run["file"], {}).get(mode)
            if before is not None:  # the same file in several shards or reruns: add up
                duration += before[0]
            table[run["file"]][mode] = (duration, status_class(run.get("status")))
    modes = [m for m in columns if any(m in cells for cells in table.values())]
    ordered = sorted(table.items(), key=lambda kv: (-max(d for d, _ in kv[1].values()), kv[0]))
    rows = [
        {
            "file": file,
            "cells": [
                {"text": seconds(cells[m][0]), "status": cells[m][1]} if m in cells else None
                for m in modes
            ],
        }
        for file, cells in ordered
    ]
    walls = [
        seconds(number(verdict.modes[m].get("wall_s")))
        if isinstance(verdict.modes.get(m), Mapping)
        else ""
        for m in modes
    ]
    return {"modes": modes, "rows": rows, "walls": walls}


def mode_facts(verdict: Verdict) -> list[str]:
    """What a mode concluded instead of running, and how much the screens beside it slowed
    the suite interpreter: facts, not warnings."""
    facts = []
    for name, mode in verdict.modes.items():
        pace = mode.get("pace") if isinstance(mode, Mapping) else None
        if isinstance(pace, Mapping) and pace:
            facts.append(pace_line(pace))
        inferred = mode.get("inferred_files") if isinstance(mode, Mapping) else None
        if not isinstance(inferred, int) or not inferred:
            continue
        runs = file_runs(mode)
        # a lazy isolated pass takes parallel's outcomes; without parallel, threads'
        source = "parallel" if "parallel" in verdict.modes else "threads"
        alike = sum(1 for r in runs if r.get("inferred") and r.get("status") != "passed")
        if inferred > alike:
            facts.append(
                f"{name}: {inferred - alike} of {len(runs)} files inferred from {source},"
                " where they passed"
            )
        if alike:
            facts.append(
                f"{name}: {alike} of {len(runs)} files not re-run, their failures alike in every"
                " screen: their tests' alone-runs decided"
            )
    return facts


def mode_notes(verdict: Verdict) -> list[str]:
    """Warnings about incomplete modes: missing shards, interrupted runs."""
    notes = []
    for name, mode in verdict.modes.items():
        if not isinstance(mode, Mapping):
            continue
        missing = mode.get("missing_shards") or []
        if missing:
            notes.append(f"{name}: shard(s) {', '.join(map(str, missing))} missing")
        if mode.get("interrupted"):
            notes.append(f"{name}: the run was interrupted")
    cut = verdict.evidence.get("cut")
    if isinstance(cut, int) and cut:
        notes.append(f"evidence: {cut} test(s) not rerun: budget (raise --evidence-budget)")
    notes += [f"evidence: {note}" for note in verdict.evidence.get("notes", ())]
    return notes + verdict_lines(verdict.modes, verdict.evidence)
