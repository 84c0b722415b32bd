"""The state ledger in the verdict: on each root, what its culprits left behind that its
victims' failure points at; and the files that left device memory, threads or processes
behind (a hint on a clean check, not a finding).

What a culprit left is read from the journals' `left` events (`gpuci.state.left`), and
a victim's failure against it as the culprit search read it (`gpuci.state.hints`): its
message and the source of its innermost frame. Each line on a root is a statement about
its culprit that its victims' failure can touch (`touched_keys`): what the failure points
at by its words or names, and for a failure in a device library's code, what that library
left on the device. The rest of what the culprit left is no cause of this failure, and the
card does not say it (the ledger itself keeps it: `scripts/show_ledger.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuci.evidence.results import ModeResults
from gpuci.model import LATENT_ORDERS, NOT_PASSING, Mode, Root
from gpuci.state.hints import failure_text, touched_keys
from gpuci.state.left import Ledger, describe

# what a file leaves that outlives it and costs the next: the clean check's table
HELD = ("cupy.pool_used", "cupy.pool_total", "torch.allocated", "torch.reserved", "cuda.error")
RUNNING = ("threads", "children", "gpu.processes")
FILES_SHOWN = 20
MODES_READ = (Mode.SUITE, Mode.ISOLATED, Mode.PARALLEL, Mode.THREADS, *LATENT_ORDERS)


def explain_roots(
    roots: Sequence[Root], results: Mapping[Mode, ModeResults], ledger: Ledger
) -> tuple[Root, ...]:
    """Each root with `left`: what its culprits left that its victims' failure can touch."""
    return tuple(dataclasses.replace(root, left=_left_by(root, results, ledger)) for root in roots)


def _left_by(root: Root, results: Mapping[Mode, ModeResults], ledger: Ledger) -> tuple[str, ...]:
    texts = [t for v in root.victims if (t := _failure(v, results))]
    lines: list[str] = []
    for culprit in root.culprits:
        own, by_file = ledger.entries(culprit)
        both = {**by_file, **own}
        touched = {k for text in texts for k in touched_keys(text, both)}
        told = describe({k: v for k, v in own.items() if k in touched}) + [
            f"its file {line}"
            for line in describe({k: v for k, v in by_file.items() if k in touched})
        ]
        prefix = f"{culprit}: " if len(root.culprits) > 1 else ""
        lines += [prefix + line for line in told]
    return tuple(lines)


def _failure(victim: str, results: Mapping[Mode, ModeResults]) -> str:
    for mode in MODES_READ:
        if mode not in results:
            continue
        run = results[mode].run
        for test in run.tests:
            if test.id == victim and test.outcome in NOT_PASSING:
                return failure_text(test.message, test.where, Path(run.rootdir))
    return ""


def files_left_behind(ledger: Ledger) -> dict[str, tuple[str, ...]]:
    """The files that left device memory, a sticky error, threads or processes behind, in
    words, at most FILES_SHOWN of them."""
    found: dict[str, tuple[str, ...]] = {}
    for file, left in ledger.files.items():
        kept: dict[str, Any] = {k: v for k, v in left.items() if k in HELD or k in RUNNING}
        lines = describe(kept)
        if lines:
            found[file] = tuple(lines)
        if len(found) == FILES_SHOWN:
            break
    return found
