"""What the fork server's parent may import: the suite's own modules (never), the modules
pytest imports through its assertion rewriter (never), what pytest and its plugins import
plainly (always, as every fresh `python -m pytest` does), and what a file imports at
module level (read with `ast`).

Child-side: it imports nothing of gpuci, as the parent must stay out of its children's way.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

MAX_PLUGIN_FILES = 200  # a plugin's own modules whose imports are read


def _installed() -> list[Path]:
    """Where installed packages live: never the user's own, even inside the rootdir."""
    return [Path(p).resolve() for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]


def is_users(name: str, roots: list[Path]) -> bool:
    """Whether the top-level module of `name` is the suite's own: under a root, not installed."""
    spec = importlib.util.find_spec(name.partition(".")[0])
    if spec is None:
        return False
    places = [spec.origin] if spec.origin not in (None, "built-in", "frozen") else []
    places += list(spec.submodule_search_locations or [])
    for place in places:
        resolved = Path(place).resolve()
        if any(resolved.is_relative_to(p) for p in _installed()):
            continue
        if any(resolved.is_relative_to(root) for root in roots):
            return True
    return False


def module_level_imports(tree: ast.Module, *, members: bool = False) -> list[str]:
    """What a module imports at module level (not in functions), in first-seen order.

    `import a.b` gives `a.b`, `from a.b import c` gives `a.b` (and `a.b.c`, which may be a
    submodule it imports, with `members`); relative imports are left out.
    """
    found: dict[str, None] = {}
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.Import):
            found.update((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found[node.module] = None
            if members:
                found.update((f"{node.module}.{alias.name}", None) for alias in node.names)
        elif isinstance(node, ast.If | ast.Try | ast.With):  # still module level
            todo[:0] = [
                *node.body,
                *getattr(node, "orelse", ()),
                *(s for h in getattr(node, "handlers", ()) for s in h.body),
                *getattr(node, "finalbody", ()),
            ]
    found.pop("__future__", None)
    return list(found)


def pytest_plugins() -> list[importlib.metadata.Distribution]:
    """Every installed distribution with a pytest11 entry point."""
    return [
        dist
        for dist in importlib.metadata.distributions()
        if any(ep.group == "pytest11" for ep in dist.entry_points)
    ]


def rewritten_by_pytest(plugins: list[importlib.metadata.Distribution]) -> set[str]:
    """The top-level modules of the plugins' distributions.

    pytest imports them through its assertion rewriter, and warns (an error under
    `filterwarnings = error`) where one was imported before: they are never preloaded.
    """
    names: set[str] = set()
    for dist in plugins:
        names.update(ep.module.partition(".")[0] for ep in dist.entry_points)
        for file in dist.files or ():
            parts = file.parts
            if len(parts) == 1 and parts[0].endswith(".py"):
                names.add(parts[0][:-3])
            elif len(parts) == 2 and parts[1] == "__init__.py":
                names.add(parts[0])
    return names


def pytest_builtins() -> list[str]:
    """pytest's own default plugins: `import pytest` leaves some for pytest's start-up."""
    config = sys.modules.get("_pytest.config")
    return [f"_pytest.{name}" for name in getattr(config, "default_plugins", ())]


def plugins_imports(
    plugins: list[importlib.metadata.Distribution], rewritten: set[str]
) -> list[str]:
    """What loading the plugins imports at module level from outside the plugins.

    From each pytest11 entry point, through the modules of its own distribution that it
    imports at module level, to the first module outside them: those (NumPy for
    pytest-run-parallel) are imported plainly, not rewritten, and a fresh interpreter would
    import them as the plugin loads. Never a module the plugin only might import (an
    integration of hypothesis's or jaxtyping's): the parent imports nothing pytest would not.
    """
    found: dict[str, None] = {}
    for dist in plugins:
        files = {
            ".".join(f.with_suffix("").parts).removesuffix(".__init__"): f
            for f in (dist.files or ())
            if f.suffix == ".py"
        }
        todo = [ep.module for ep in dist.entry_points if ep.group == "pytest11"]
        seen: set[str] = set()
        while todo and len(seen) < MAX_PLUGIN_FILES:
            name = todo.pop()
            if name in seen or name not in files:
                continue
            seen.add(name)
            try:
                tree = ast.parse(Path(str(dist.locate_file(files[name]))).read_bytes())
            except (OSError, SyntaxError, ValueError):
                continue
            for imported in module_level_imports(tree):
                if imported.partition(".")[0] in rewritten:
                    todo.append(imported)
                else:
                    found[imported] = None
    return list(found)
