"""The package's layout: data flows one way, and every room stays small enough to read.

Each module may import only the modules before it in STAGES (the shared model first,
the command line last); a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gpuci"
# The order data flows in: a module imports only modules listed before it.
STAGES = (
    "model",
    "masking",
    "formats",
    "outdir",
    "plugin_poison",
    "pytest_plugin",
    "discover",
    "modes",
    "config",
    "plan",
    "gpus",
    "reaper",
    "holders",
    "strays",
    "supervisor",
    "gpumem",
    "preimport",
    "preloads",
    "forkserver",
    "logs",
    "journal",
    "interpreter",
    "junit",
    "progress",
    "resume",
    "unit",
    "pool",
    "run",
    "screens",
    "plan_mode",
    "results",
    "reproduce",
    "fingerprints",
    "classify",
    "probe",
    "alone",
    "priorities",
    "beside",
    "culprits",
    "strict",
    "sanitizer",
    "budget",
    "evidence",
    "check",
    "merge",
    "describe",
    "diff",
    "roots",
    "groups",
    "summary",
    "escape",
    "timeline",
    "cards",
    "report_data",
    "comment_data",
    "report",
    "gitlab",
    "publish",
    "cli",
    "__main__",
)
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _modules() -> list[str]:
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def _gpuci_imports(module: str) -> set[str]:
    """The gpuci modules `module` imports, at the top or inside functions."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "gpuci":
                found.update(alias.name for alias in node.names if alias.name != "__version__")
            elif node.module.startswith("gpuci."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("gpuci."))
    return found


def test_every_module_has_a_place_in_the_flow() -> None:
    assert sorted(STAGES) == _modules()


@pytest.mark.parametrize("module", STAGES)
def test_imports_flow_one_way(module: str) -> None:
    earlier = set(STAGES[: STAGES.index(module)])
    later = _gpuci_imports(module) - earlier
    assert not later, f"gpuci/{module}.py imports {sorted(later)}, which come after it"


CHILD_SIDE = ("plugin_poison", "pytest_plugin", "preimport")


@pytest.mark.parametrize("module", CHILD_SIDE)
def test_the_child_side_imports_nothing_of_gpuci(module: str) -> None:
    # loaded into every child interpreter (the plugin and its poisoning) or their parent
    # (the fork server): it must stay cheap and self-contained
    assert _gpuci_imports(module) <= set(CHILD_SIDE)


@pytest.mark.parametrize("module", _modules())
def test_modules_and_functions_stay_small(module: str) -> None:
    source = (PACKAGE / f"{module}.py").read_text(encoding="utf-8")
    lines = source.splitlines()
    assert len(lines) <= MAX_MODULE_LINES, f"gpuci/{module}.py has {len(lines)} lines"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            # a longer function says why on its first line, in a comment
            if length > MAX_FUNCTION_LINES:
                assert "--" in lines[node.lineno - 1].partition("#")[2], (
                    f"gpuci/{module}.py: {node.name} has {length} lines and no reason given"
                )
