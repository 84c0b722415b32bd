"""The pytest plugins, preloaded the way pytest loads them: through its assertion rewriter.

A fresh `python -m pytest` marks every module of the pytest11 distributions for assertion
rewriting, then imports each entry point that is not blocked (`-p no:NAME`). With
pytest-run-parallel and hypothesis installed that is over a hundred rewritten modules in
every interpreter: about 0.15 s from pytest's cache, 0.5 s where bytecode is not written.
The fork server's parent does it once (`load_plugins`), with pytest's own hook class and
its default settings, so a child holds the modules a fresh pytest would make, loaded by a
hook its own pytest does not warn about. The child checks that it loads those plugins with
the same rewriting (`differing_plugins`); where it does not, it runs again fresh.

Both sides run outside gpuci's own process: the parent imports nothing of gpuci but the
audit, and the child's plugin only compares.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GROUP = "pytest11"
DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")  # pytest's, which the parent's hook uses
ALWAYS_BLOCKED = frozenset({"randomly"})  # every evidence run says -p no:randomly
AUTOLOAD_OFF = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"
# imported before pytest installs its rewriting hook, in a fresh interpreter too
PYTESTS_OWN = frozenset({"pytest", "_pytest", "pluggy", "iniconfig", "packaging", "gpuci"})


@dataclass(slots=True)
class Plugins:
    """What the parent loaded: the entry points, and whether it rewrote what else it holds."""

    loaded: dict[str, Any] = field(default_factory=dict)  # entry point name -> its object
    marked: list[str] = field(default_factory=list)  # the plugins' modules, all rewritten
    # every other module of the parent's, not pytest's own: whether a hook rewrote it (a
    # fresh pytest rewrites one whose file name matches python_files as it imports it)
    brought: dict[str, bool] = field(default_factory=dict)
    unlike_default: list[str] = field(default_factory=list)  # of those, where pytest's
    # default python_files would have done otherwise

    def note_brought(self) -> None:
        """Record, once every import is done, how each module was loaded."""
        from _pytest.assertion.rewrite import AssertionRewritingHook

        for name, module in list(sys.modules.items()):
            top = name.partition(".")[0]
            where = getattr(module, "__file__", None)
            if not where or top in PYTESTS_OWN or top in sys.stdlib_module_names:
                continue
            if not any(name == m or name.startswith(m + ".") for m in self.marked):
                loader = getattr(module, "__loader__", None)
                self.brought[where] = isinstance(loader, AssertionRewritingHook)
        self.unlike_default = [
            w for w, r in self.brought.items() if _looks_like_test(w, DEFAULT_PYTHON_FILES) != r
        ]


class _HookConfig:
    """The little of pytest's Config its rewriting hook reads: the ini values it asks for
    (pytest's defaults) and the stash that holds the assertion state."""

    def __init__(self) -> None:
        import pytest

        self.stash = pytest.Stash()
        self.warned: list[str] = []

    def getini(self, name: str) -> Any:
        return {"python_files": [*DEFAULT_PYTHON_FILES], "enable_assertion_pass_hook": False}[name]

    def issue_config_time_warning(self, warning: Warning, stacklevel: int) -> None:
        self.warned.append(str(warning))  # a plugin module imported before: not preloaded


class _State:  # pytest's AssertionState, as the hook uses it
    mode = "rewrite"
    hook: Any = None

    def trace(self, *_: object) -> None:
        return None


def blocked_plugins(environ: Mapping[str, str]) -> frozenset[str]:
    """The plugins no child loads: `-p no:NAME` in PYTEST_ADDOPTS, and gpuci's own."""
    words = shlex.split(environ.get("PYTEST_ADDOPTS", ""))
    given = [b for a, b in itertools.pairwise(words) if a == "-p"]
    given += [w.removeprefix("-p") for w in words if w.startswith("-pno:")]
    return ALWAYS_BLOCKED | {g.removeprefix("no:") for g in given if g.startswith("no:")}


def entry_points(
    dists: Sequence[importlib.metadata.Distribution], blocked: frozenset[str]
) -> list[importlib.metadata.EntryPoint]:
    """The pytest11 entry points pytest would load, in its order (pluggy's: distributions
    as importlib.metadata lists them, a name once)."""
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for dist in dists:
        for ep in dist.entry_points:
            if ep.group == GROUP and ep.name not in found:
                found[ep.name] = ep
    return [ep for name, ep in found.items() if name not in blocked]


def load_plugins(
    dists: Sequence[importlib.metadata.Distribution],
    blocked: frozenset[str],
    audited_import: Callable[[str], list[str]],
) -> tuple[Plugins, str]:
    """Import the entry points of the plugins' distributions `dists` (in
    importlib.metadata's order) through pytest's rewriting hook; what was loaded,
    and why not (or '' where every one was). `audited_import` imports one module and says
    what it left that a fork would not copy; a plugin that left anything ends the loading
    with that reason (this process must then start over without it)."""
    from _pytest.assertion.rewrite import AssertionRewritingHook, assertstate_key
    from _pytest.config import _iter_rewritable_modules

    plugins = Plugins()
    files = (str(f) for d in dists for f in d.files or ())
    marked = list(_iter_rewritable_modules(files))
    early = sorted(set(marked) & set(sys.modules))
    if early:  # imported plainly already: pytest would warn, and so must a child
        return plugins, f"{', '.join(early)} already imported"
    config = _HookConfig()
    state = _State()
    config.stash[assertstate_key] = state  # type: ignore[misc]
    hook = state.hook = AssertionRewritingHook(config)  # type: ignore[arg-type]
    hook.mark_rewrite(*marked)
    sys.meta_path.insert(0, hook)
    try:
        for ep in entry_points(dists, blocked):
            left = audited_import(ep.module)
            if left:
                return plugins, f"the pytest plugin {ep.name} left {', '.join(left)}"
            plugins.loaded[ep.name] = ep.load()
    finally:
        sys.meta_path.remove(hook)
    plugins.marked = marked
    return plugins, "; ".join(config.warned)


def differing_plugins(plugins: Plugins, config: Any) -> str:
    """In a forked child, once pytest configured: why a fresh interpreter would hold the
    parent's modules otherwise (plugins not loaded, or rewritten otherwise); '' where alike."""
    rewrites = config.getoption("assertmode", "rewrite") == "rewrite"
    if plugins.loaded:
        if not rewrites:
            return "pytest does not rewrite assertions here (--assert)"
        if os.environ.get(AUTOLOAD_OFF) or config.getoption("disable_plugin_autoload", False):
            return "pytest does not load plugins by entry point here"
        if config.getini("enable_assertion_pass_hook"):
            return "enable_assertion_pass_hook is set"
        manager = config.pluginmanager
        for name, plugin in plugins.loaded.items():
            if manager.get_plugin(name) is not plugin:
                return f"the pytest plugin {name} is not loaded here"
    patterns = tuple(str(p) for p in config.getini("python_files"))
    if not rewrites:  # no hook at all: nothing is rewritten
        unlike = [w for w, r in plugins.brought.items() if r]
    elif patterns == DEFAULT_PYTHON_FILES:
        unlike = plugins.unlike_default
    else:
        unlike = [w for w, r in plugins.brought.items() if _looks_like_test(w, patterns) != r]
    return f"python_files would rewrite {unlike[0]} otherwise" if unlike else ""


def _looks_like_test(where: str, patterns: Sequence[str]) -> bool:
    """Whether pytest's hook rewrites a module at `where` by its file's name."""
    from _pytest.pathlib import fnmatch_ex

    return Path(where).name == "conftest.py" or any(fnmatch_ex(p, where) for p in patterns)
