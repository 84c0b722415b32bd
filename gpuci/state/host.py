"""The host side of a snapshot: the process state a test can leave behind for the next.

Child side (loaded into every test interpreter): each probe is a few system calls or
attribute reads, and imports nothing a suite did not import itself (NumPy, `decimal`,
`locale` are looked up in `sys.modules`). A snapshot is a flat mapping from a key to the
raw value its probe read, compared by equality (most often identical objects: microseconds
between two tests); only a value that changed is rendered (`render`) into a plain value or
a frozenset of strings (compared as a set) for the journal. No environment variable's
value leaves this process: the journal names the variables only.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

# a rendered value: a frozenset of str is shown as is; env's pairs of bytes by their names only
Value = str | int | float | bool | None | frozenset[str] | frozenset[tuple[bytes, bytes]]
Snapshot = dict[str, Any]  # key -> raw value (`render` makes it a Value)
PROC_SELF = Path("/proc/self")
# set by pytest itself while a test runs; outside a test's protocol it is gone already
OWN_VARIABLES = frozenset({b"PYTEST_CURRENT_TEST"})
# the C module: `signal.getsignal` wraps each answer in an enum, 10 times the cost
_RAW_SIGNAL: Any = importlib.import_module("_signal")
SIGNALS = tuple(
    (int(s), s.name) for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP)
)
SIGNAL_NUMBERS = tuple(number for number, _ in SIGNALS)


def host_snapshot(*, full: bool) -> Snapshot:
    """The host state of this process now (main thread's view). `full` adds what costs a
    read of /proc (the umask, child processes, open descriptors): per file, not per test."""
    snap: Snapshot = {
        "cwd": _cwd(),
        "env": _environment(),
        "sys.path": frozenset(sys.path),
        "warnings": tuple(warnings.filters),
        "threads": frozenset(
            f"{t.name}{' (daemon)' if t.daemon else ''}"
            for t in threading.enumerate()
            if t is not threading.main_thread() and t.is_alive()
        ),
        "signals": tuple(map(_RAW_SIGNAL.getsignal, SIGNAL_NUMBERS)),
        "logging": _logging_handlers(),
    }
    if full:
        snap.update(umask=_umask(), children=_children(), fds=_descriptors())
    for key, probe in LIBRARY_PROBES.items():
        module = sys.modules.get(key.partition(".")[0])
        if module is not None:
            try:
                snap[key] = probe(module)
            except Exception as exc:  # a probe never fails the test it follows
                snap[key] = f"unreadable: {type(exc).__name__}"
    return snap


def render(key: str, raw: Any) -> Value:
    """A raw value as the journal tells it (a changed one only: rendering costs more)."""
    renderer = RENDERERS.get(key)
    if renderer is None or not isinstance(raw, tuple):  # plain already, or "unreadable: ..."
        return raw  # type: ignore[no-any-return]
    return renderer(raw)


def _environment() -> tuple[tuple[bytes, bytes], ...]:
    """The environment as the OS holds it (bytes: nothing decoded until a name is shown);
    the values stay in this process, compared, never written."""
    raw = getattr(os.environ, "_data", None)  # CPython's; else encode what os.environ says
    if not isinstance(raw, dict):
        raw = {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()}
    return tuple(raw.items())


def _environment_pairs(raw: tuple[tuple[bytes, bytes], ...]) -> frozenset[tuple[bytes, bytes]]:
    return frozenset(item for item in raw if item[0] not in OWN_VARIABLES)


def _signal_handlers(raw: tuple[Any, ...]) -> frozenset[str]:
    return frozenset(
        f"{name}: {_handler_name(handler)}"
        for (_, name), handler in zip(SIGNALS, raw, strict=True)
        if handler is not None and handler != _RAW_SIGNAL.SIG_DFL
    )


def _cwd() -> str:
    try:
        return os.getcwd()  # noqa: PTH109 -- between every two tests: Path.cwd() costs 10x
    except OSError:  # the folder was removed under us: that, too, is left behind
        return "(removed)"


def _umask() -> str:
    """The umask, read without setting it (Linux: /proc/self/status); else set and reset."""
    try:
        for line in (PROC_SELF / "status").read_text().splitlines():
            if line.startswith("Umask:"):
                return "0o" + line.split()[1].lstrip("0").rjust(3, "0")
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return f"0o{mask:03o}"


def _children() -> frozenset[str]:
    """This process's live child processes (pid and program name: never the arguments,
    which may hold secrets)."""
    pids: set[str] = set()
    try:
        for task in (PROC_SELF / "task").iterdir():
            pids.update((task / "children").read_text().split())
    except OSError:
        return frozenset()
    found = set()
    for pid in pids:
        try:
            name = (Path("/proc") / pid / "comm").read_text().strip()
        except OSError:
            continue  # ended since
        found.add(f"{name} (pid {pid})")
    return frozenset(found)


def _descriptors() -> tuple[tuple[int, str], ...] | None:
    """Each open descriptor and what it points at (`/tmp/x.log`, `pipe:[81]`,
    `anon_inode:[eventfd]`, `/dev/nvidia0`): whose it is, the driver's or a test's, is told
    by what it points at (`gpuci.state.changes`)."""
    folder = PROC_SELF / "fd"
    try:
        names = [entry.name for entry in folder.iterdir()]  # the listing's own closed now
    except OSError:
        return None
    found = []
    for name in names:
        try:
            found.append((int(name), str((folder / name).readlink())))
        except (OSError, ValueError):  # closed since: the listing's own, another thread's
            continue
    return tuple(sorted(found))


def _handler_name(handler: object) -> str:
    if handler == _RAW_SIGNAL.SIG_IGN:
        return "ignored"
    module = getattr(handler, "__module__", "") or ""
    name = getattr(handler, "__qualname__", "") or type(handler).__name__
    return f"{module}.{name}" if module else name


def _filter_text(entry: tuple[Any, ...]) -> str:
    """A warnings filter as -W spells it: action:message:category:module:lineno."""
    action, message, category, module, line = entry
    pattern = getattr(message, "pattern", message) or ""
    where = getattr(module, "pattern", module) or ""
    return f"{action}:{pattern}:{getattr(category, '__name__', category)}:{where}:{line}"


def _logging_handlers() -> frozenset[str]:
    """Handlers on the root logger and every named one, and logging.disable's level; pytest
    adds its own only while a test runs."""
    logging = sys.modules.get("logging")
    if logging is None:
        return frozenset()
    loggers = [logging.root, *logging.Logger.manager.loggerDict.values()]
    found = {
        f"{getattr(lg, 'name', '?')}: {type(h).__name__}"
        for lg in loggers
        for h in getattr(lg, "handlers", ())
    }
    found.add(f"root level: {logging.getLevelName(logging.root.level)}")
    if logging.root.manager.disable:
        found.add(f"disabled up to {logging.getLevelName(logging.root.manager.disable)}")
    return frozenset(found)


def _numpy_errors(numpy: Any) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(numpy.geterr().items()))


def _numpy_print(numpy: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(numpy.get_printoptions().items()))


def _settings_text(raw: tuple[tuple[str, Any], ...]) -> str:
    return ",".join(f"{k}={v}" for k, v in raw)


def _decimal_context(decimal: Any) -> tuple[tuple[str, Any], ...]:
    """The main thread's context, less its flags (any arithmetic raises them)."""
    ctx = decimal.getcontext()
    traps = "|".join(sorted(t.__name__ for t, on in ctx.traps.items() if on))
    fields = ("prec", "rounding", "Emin", "Emax", "capitals", "clamp")
    return (*((f, getattr(ctx, f)) for f in fields), ("traps", traps))


def _locale(locale: Any) -> str:
    return str(locale.setlocale(locale.LC_ALL, None))  # None: asks, changes nothing


LIBRARY_PROBES: dict[str, Callable[[Any], Any]] = {
    "numpy.seterr": _numpy_errors,
    "numpy.printoptions": _numpy_print,
    "decimal.context": _decimal_context,
    "locale": _locale,
}
RENDERERS: dict[str, Callable[[Any], Value]] = {
    "env": _environment_pairs,
    "warnings": lambda raw: frozenset(map(_filter_text, raw)),
    "signals": _signal_handlers,
    "numpy.seterr": _settings_text,
    "numpy.printoptions": _settings_text,
    "decimal.context": _settings_text,
}
