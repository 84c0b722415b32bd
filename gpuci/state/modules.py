"""The modules a test file brought: what `sys.modules` gained while pytest imported it, and
while its tests ran. Child side, as cheap as the rest of the ledger: names only.

A file that imports CuPy or PyTorch brings hundreds or thousands of submodules; what a
later test can need from it is the package being there, or a submodule of a package that
was there already (`cupy.cuda.nccl`, which preloads NCCL, under a `cupy` every file
imports). So a name is kept only where its parent was not gained too: each gained
package's top, and the submodules gained under packages loaded before. Past MOST_NAMES
only the top-level names are kept: what a failure names (`No module named 'x'`,
`module 'multiprocessing' has no attribute ...`) is most often a top-level package, and the
journal of a file stays small whatever it imports.
"""

from __future__ import annotations

import sys
from collections.abc import Set

MOST_NAMES = 100  # names journaled for one file; past that, only top-level names


def loaded() -> frozenset[str]:
    """The names in `sys.modules` now."""
    return frozenset(sys.modules)


def gained(before: Set[str], after: Set[str]) -> list[str]:
    """The modules in `after` and not in `before`, each under the shallowest gained one (a
    gained package stands for its submodules), sorted; past MOST_NAMES the top-level names."""
    new = after - before
    kept = sorted(name for name in new if not _gained_parent(name, new))
    if len(kept) > MOST_NAMES:
        kept = sorted({name.partition(".")[0] for name in kept})[:MOST_NAMES]
    return kept


def _gained_parent(name: str, new: Set[str]) -> bool:
    parts = name.split(".")
    return any(".".join(parts[:i]) in new for i in range(1, len(parts)))
