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
"""

from __future__ import annotations

import linecache
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


def pointed_keys(text: str, left: Mapping[str, Any]) -> list[str]:
    """The keys of `left` (one test's changes) that `text` (a failure) points at."""
    return [key for key, change in left.items() if _points_at(text, key, change)]


def _points_at(text: str, key: str, change: Any) -> bool:
    # the most specific kind: `torch.allocated`'s words, not every `torch.` flag's
    prefixes = [k for k in POINTERS if key.startswith(k)]
    words = POINTERS[max(prefixes, key=len)] if prefixes else ()
    if any(word in text for word in words):
        return True
    return any(len(named) >= MIN_NAMED and named in text for named in _named(change))


def _named(change: Any) -> Iterator[str]:
    """What a change names that a failure may repeat: a folder, a variable, a thread."""
    if isinstance(change, dict):
        for names in change.values():
            for name in names:
                yield str(name).split(" (", 1)[0].split(": ", 1)[0]
    elif isinstance(change, list):
        yield from (str(v) for v in change if isinstance(v, str))


def hinted_candidates(ledger: Ledger, candidates: Sequence[str], text: str) -> tuple[str, ...]:
    """Of `candidates` (the tests before a victim, in the order they ran), those the
    failure points at, in that order: for each kind of state it points at, the last test
    that changed it (what the victim inherited). Where the ledger has no test's entry for
    it, the tests of the last file that changed it (the ledger was taken per file, or the
    file's import changed it: any of its tests imports it again)."""
    chosen: dict[str, str] = {}  # key -> the last candidate that changed it
    for test_id in candidates:
        for key in pointed_keys(text, ledger.tests.get(test_id, {})):
            chosen[key] = test_id
    picked = set(chosen.values())
    by_file: dict[str, list[str]] = {}
    for test_id in candidates:
        by_file.setdefault(test_id.split("::", 1)[0], []).append(test_id)
    # a file's entries: what its tests left (per file), what importing it left
    entries = {f: {**ledger.imports.get(f, {}), **ledger.files.get(f, {})} for f in by_file}
    files = [f for f in by_file if pointed_keys(text, entries[f])]
    covered = {key for f in files for key in pointed_keys(text, entries[f])}
    if files and not covered <= chosen.keys():  # a file's change no test's entry explains
        picked.update(by_file[files[-1]])
    return tuple(c for c in candidates if c in picked)
