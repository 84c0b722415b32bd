"""What a victim's failure points at in the ledger: the tests before it that left the state
its message and its innermost frame speak of, so that a culprit search tries them first.

A failure points at a kind of state by its words (`FileNotFoundError` at the working
directory, `PermissionError` at the umask, `out of memory` at device memory held) or by
naming what a test left (the variable it set, the folder it left current, the thread it
left running). The text read is the failure's first line and the source of its innermost
frame in the suite's own code, from its function's `def` to the failing line (`assert
os.environ.get("X") is None` fails as `assert 'v' is None`: the line names the variable;
a copy that raced a leaked stream fails an array comparison, after a line that
synchronizes). A hint is only a hint: the search confirms it by running it, and bisects
where it does not show the failure.

What a failure can touch (`touched_keys`: what a root's card says its culprits left) is
what it points at, and where it failed in a device library's code with words that point
at no kind of the host's state, what that library left on the device. The hints are its
sharper part (what the failure points at): a hint never points at what a card would not
say.

A test that depends on others points at the modules earlier files brought
(`gpuci.state.modules`): one its failure names, or one the suite's own code looks up in
`sys.modules` without importing it (`module_providers`); the files that brought it are run
first.
"""

from __future__ import annotations

import functools
import linecache
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuci.state.left import Ledger

_WHERE = re.compile(r"^(.*):(\d+)$")
MIN_NAMED = 4  # a value shorter than this named in a failure is a coincidence, not a pointer
MAX_SOURCE_LINES = 40  # of the failing function, read back from the failing line
# a kind of state (a key, or the start of one) -> words in a failure that point at it
POINTERS: dict[str, tuple[str, ...]] = {
    "cwd": ("FileNotFoundError", "No such file", "getcwd", "cwd", "working directory"),
    "umask": ("PermissionError", "Permission denied", "umask", "st_mode", "S_IMODE"),
    "env": ("environ", "getenv", "environment variable"),
    "sys.path": ("ModuleNotFoundError", "ImportError", "No module named", "sys.path"),
    "warnings": ("Warning", "warnings"),
    "threads": ("thread", "Thread"),
    "children": ("subprocess", "child process", "ChildProcessError", "zombie"),
    "fds": ("Too many open files", "ResourceWarning", "descriptor", "/proc/self/fd"),
    "signals": ("signal", "SIG", "KeyboardInterrupt"),
    "logging": ("logging", "getLogger", "caplog", "handler", "log record"),
    "numpy.seterr": ("FloatingPointError", "seterr", "divide by zero", "overflow", "invalid value"),
    "numpy.printoptions": ("printoptions", "repr(", "str(", "array2string"),
    "decimal.context": ("Decimal", "decimal", "Inexact", "Rounded", "InvalidOperation"),
    "locale": ("locale", "strftime", "strptime", "UnicodeDecodeError", "UnicodeEncodeError"),
    "torch.": ("cudnn", "tf32", "dtype", "deterministic", "float64", "float32"),
    "cupy.pool": ("OutOfMemoryError", "out of memory", "memory pool", "set_limit", "limit"),
    "torch.allocated": ("OutOfMemoryError", "out of memory", "CUDA out of memory"),
    "torch.reserved": ("OutOfMemoryError", "out of memory", "CUDA out of memory"),
    "torch.memory_fraction": ("OutOfMemoryError", "out of memory", "memory fraction"),
    "gpu.processes": ("out of memory", "OutOfMemoryError", "busy or unavailable"),
    "cupy.device": ("device", "Device"),
    "torch.device": ("device", "Device"),
    "cupy.stream": ("stream", "Stream", "synchroniz", "Synchroniz"),
    "torch.stream": ("stream", "Stream", "synchroniz", "Synchroniz"),
    "cuda.error": ("CUDA", "cuda", "illegal", "cudaError", "launch failure"),
    "cupy.routine_accelerators": ("accelerator", "cub", "cutensor"),
    "cupy.reduction_accelerators": ("accelerator", "cub", "cutensor"),
    "cupy.fft": ("fft", "FFT", "plan"),
}


# words that rule a kind of state out whatever else the failure says: an out-of-memory
# error under a pool limit the process set (CuPy's `limit set to`) is the process's own
# state, never memory another process holds
RULED_OUT: dict[str, tuple[str, ...]] = {"gpu.processes": ("limit set to",)}
# words that name one kind of state as sharply as a variable's name: CuPy's out-of-memory
# error under a pool limit says so, and only a test that changed the limit set it (memory
# another test left in the pool counts towards the limit only where one is set)
NAMED_BY: dict[str, tuple[str, ...]] = {"cupy.pool_limit": ("limit set to",)}
DEVICE_KINDS = ("cupy.", "torch.", "cuda.", "gpu.")  # the device's state; the rest, the host's
# a failure in code of a device library can be touched by the state that library left on
# the device whatever its words (a stale buffer from the pool fails an array comparison),
# and any CUDA code by a sticky error: a kind of state (the start of a key) -> that code
DEVICE_CODE: dict[str, re.Pattern[str]] = {
    "cupy.": re.compile(r"\bcupyx?\b|\bcp\."),
    "torch.": re.compile(r"\btorch\b"),
    "cuda.": re.compile(r"\bcupyx?\b|\bcp\.|\btorch\b|\bcuda\b|\bCUDA\b"),
}


def failure_text(message: str, where: str, rootdir: Path) -> str:
    """The failure's first line and the source line of its innermost own frame."""
    match = _WHERE.match(where)
    if match is None:
        return message
    path = Path(match[1])
    lines = linecache.getlines(str(path if path.is_absolute() else rootdir / path))
    return "\n".join([message, *_function_until(lines, int(match[2]))])


def _function_until(lines: list[str], number: int) -> list[str]:
    """The lines of the function that holds line `number` (1-based), from its `def` to
    that line (at most MAX_SOURCE_LINES); just that line where no `def` encloses it."""
    if not 0 < number <= len(lines):
        return []
    failing = lines[number - 1]
    indent = len(failing) - len(failing.lstrip())
    first = number - 1
    for i in range(number - 2, max(-1, number - 1 - MAX_SOURCE_LINES), -1):
        stripped = lines[i].lstrip()
        if stripped.startswith(("def ", "async def ")) and len(lines[i]) - len(stripped) < indent:
            first = i
            break
    return [line.strip() for line in lines[first:number]]


def pointed_keys(text: str, left: Mapping[str, Any], *, named_only: bool = False) -> list[str]:
    """The keys of `left` (one test's changes) that `text` (a failure) points at; with
    `named_only`, only those whose change the text names (a variable, a folder)."""
    marks = _marks(text, left, named_only=named_only)
    return [key for key in left if any(m.partition("=")[0] == key for m in marks)]


def touched_keys(text: str, left: Mapping[str, Any]) -> list[str]:
    """The keys of `left` that a failure (`text`) can touch: those it points at, and where
    it failed in a device library's code and its words point at no kind of the host's
    state, what that library left on the device. What a root's card says its culprits
    left; the hints run first the tests that left what the failure points at, the sharper
    part of it."""
    pointed = set(pointed_keys(text, left))
    if not _points_at_the_host(text):  # a missing module in CuPy code is no device's doing
        for kind, code in DEVICE_CODE.items():
            if code.search(text):
                pointed.update(k for k in left if k.startswith(kind))
    return [key for key in left if key in pointed]


def _points_at_the_host(text: str) -> bool:
    """Whether a failure's words point at a kind of the host's state (a folder, a module,
    a variable, a thread...), whoever left it."""
    return any(
        word in text
        for kind, words in POINTERS.items()
        if not kind.startswith(DEVICE_KINDS)
        for word in words
    )


def _marks(text: str, left: Mapping[str, Any], *, named_only: bool) -> set[str]:
    """What of `left` the failure points at: `KEY=NAME` for what it names (each variable,
    folder, thread on its own), else `KEY` where its words point at that kind of state."""
    marks: set[str] = set()
    for key, change in left.items():
        if any(word in text for word in RULED_OUT.get(key, ())):
            continue
        named = {n for n in _named(key, change) if len(n) >= MIN_NAMED and n in text}
        if named:
            marks.update(f"{key}={name}" for name in named)
            continue
        if any(words in text for words in NAMED_BY.get(key, ())):
            marks.add(key)
            continue
        # the most specific kind: `torch.allocated`'s words, not every `torch.` flag's
        prefixes = [k for k in POINTERS if key.startswith(k)]
        words = POINTERS[max(prefixes, key=len)] if prefixes and not named_only else ()
        if any(word in text for word in words):
            marks.add(key)
    return marks


def _named(key: str, change: Any) -> Iterator[str]:
    """What a change left that a failure may name: the folder it left current, a variable
    it set, changed or removed, a thread it left running, a file it left open (not what was
    there before: the suite's own folder is in many a failure's paths; not a descriptor's
    kind: `pipe` is in many a word)."""
    if key == "fds" and isinstance(change, dict):
        yield from (n.split(" (", 1)[0] for n in change.get("added", []) if n.startswith("/"))
    elif isinstance(change, dict):
        for how, names in change.items():
            if how != "removed" or all(isinstance(n, str) and n.isidentifier() for n in names):
                yield from (str(n).split(" (", 1)[0].split(": ", 1)[0] for n in names)
    elif isinstance(change, list) and len(change) == 2 and isinstance(change[1], str):
        yield change[1]


def hinted_candidates(ledger: Ledger, candidates: Sequence[str], text: str) -> tuple[str, ...]:
    """Of `candidates` (the tests before a victim, in the order they ran), those the
    failure points at, in that order: for each kind of state it points at, the last test
    that changed it (what the victim inherited). Where the ledger has no test's entry for
    it, the tests of the last file that changed it (the ledger was taken per file, or the
    file's import changed it: any of its tests imports it again). What the failure names
    (`APP_MODE`, a folder) is a sharper pointer than its words (`environ`): where it names
    something a test or file left, only those are hinted."""
    for named_only in (True, False):
        picked = _pointed(ledger, candidates, text, named_only=named_only)
        if picked:
            return picked
    return ()


def _pointed(
    ledger: Ledger, candidates: Sequence[str], text: str, *, named_only: bool
) -> tuple[str, ...]:
    chosen: dict[str, str] = {}  # mark -> the last candidate that left it
    for test_id in candidates:
        for mark in _marks(text, ledger.tests.get(test_id, {}), named_only=named_only):
            chosen[mark] = test_id
    picked = set(chosen.values())
    by_file: dict[str, list[str]] = {}
    for test_id in candidates:
        by_file.setdefault(test_id.split("::", 1)[0], []).append(test_id)
    # a file's entries: what its tests left (per file), what importing it left; a mark no
    # test's entry explains is its last file's (every test of it: the file's doing)
    last_file: dict[str, str] = {}
    for file in by_file:
        entries = {**ledger.imports.get(file, {}), **ledger.files.get(file, {})}
        for mark in _marks(text, entries, named_only=named_only) - chosen.keys():
            last_file[mark] = file
    for file in set(last_file.values()):
        picked.update(by_file[file])
    return tuple(c for c in candidates if c in picked)


MAX_PROVIDERS = 8  # files that brought a module a failure points at: more point at none
MAX_SCANNED = 5000  # the suite's own source files read for modules looked up in sys.modules
SKIPPED_DIRS = frozenset({"node_modules", "site-packages", "__pycache__", "build", "dist"})
# code that behaves differently where another file imported a module: it looks the
# module up in sys.modules without importing it (structlog's and logging's process name)
_LOOKUP = re.compile(
    r"""sys\.modules(?:\.get\(|\[)\s*['"]([\w.]+)['"]"""
    r"""|['"]([\w.]+)['"]\s+(?:not\s+)?in\s+sys\.modules\b"""
)


def module_providers(
    ledger: Ledger,
    victim: str,
    *,
    files: Sequence[str],
    candidates: Sequence[str],
    text: str,
    rootdir: Path,
) -> tuple[str, ...]:
    """For a test that depends on others: of the earlier `files` (in order), those that
    brought a module its failure (`text`) names, or where it names none, a module the
    suite's own code looks up in `sys.modules` without importing it; a module its own file
    brings points at no one. Each as the file (its import brought it: run collected) or
    its tests among `candidates` (its tests did). None where more than MAX_PROVIDERS
    files brought it."""
    own = _brought(ledger, victim.split("::", 1)[0])
    brought = {f: _brought(ledger, f) - own for f in files}
    offered = set().union(*brought.values()) if brought else set()
    pointed = {m for m in offered if _names_module(text, m)}
    if not pointed:
        pointed = offered & looked_up(rootdir)
    providers = [f for f in files if brought[f] & pointed]
    if not providers or len(providers) > MAX_PROVIDERS:
        return ()
    hinted: list[str] = []
    for file in providers:
        if ledger.imported_modules.get(file, set()) & pointed:
            hinted.append(file)
        else:
            hinted.extend(c for c in candidates if c.split("::", 1)[0] == file)
    return tuple(hinted)


def _brought(ledger: Ledger, file: str) -> set[str]:
    """The modules `file` brought, less the test module itself (`tests.test_a`)."""
    stem = Path(file).stem
    names = ledger.imported_modules.get(file, set()) | ledger.test_modules.get(file, set())
    return {m for m in names if m.rpartition(".")[2] != stem}


def _names_module(text: str, module: str) -> bool:
    """Whether a failure names `module` (`multiprocessing`, `cupy.cuda.nccl`), or where it
    is a submodule, its parent missing it (`module 'cupy.cuda' has no attribute 'nccl'`)."""
    if len(module) < MIN_NAMED:
        return False
    if re.search(rf"(?<![\w.]){re.escape(module)}(?![\w])", text):
        return True
    parent, _, last = module.rpartition(".")
    missing = rf"{re.escape(parent)}'? has no attribute '?{re.escape(last)}\b"
    return bool(parent) and re.search(missing, text) is not None


@functools.cache
def looked_up(rootdir: Path) -> frozenset[str]:
    """The modules the suite's own source looks up in `sys.modules` (at most MAX_SCANNED
    files under `rootdir`, none in hidden folders or installed packages)."""
    found: set[str] = set()
    scanned = 0
    for folder, dirs, names in os.walk(rootdir):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS]
        for name in names:
            if not name.endswith(".py"):
                continue
            scanned += 1
            if scanned > MAX_SCANNED:
                return frozenset(found)
            try:
                source = Path(folder, name).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if "sys.modules" in source:
                found.update(a or b for a, b in _LOOKUP.findall(source))
    return frozenset(found)
