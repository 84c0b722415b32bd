"""Reports: what pytest's reports of a test or a collection say, in gpuci's journal's words
(an outcome, the failure's first line, its innermost frame in the suite's own code, an
INTERNALERROR's cause). Child side, loaded with the plugin: it imports nothing of gpuci."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # gpuci's own process reads the patterns below, and runs no pytest
    import pytest

MESSAGE_LIMIT = 500
_FRAME = re.compile(r"(\S+):(\d+): in ")  # a traceback frame: `path:line: in function`
SITE_DIRS = ("site-packages", "dist-packages")  # whose frames are not the suite's own
# The device ran out of memory: CuPy's and PyTorch's OutOfMemoryError (and the CPU
# example's fake one), the CUDA runtime's and driver's error names, PyTorch's message, and
# CuPy's (a test that catches the error and asserts with its text keeps it).
OUT_OF_MEMORY = re.compile(
    r"\bOutOfMemoryError\b|\bcudaErrorMemoryAllocation\b|\bCUDA_ERROR_OUT_OF_MEMORY\b"
    r"|\bCUDA out of memory\b|\bOut of memory allocating\b"
)
# ... but a pool limit the process set itself (CuPy: "limit set to: N bytes") is process
# state that every thread shares, which is what the threads mode is there to catch.
POOL_LIMIT = re.compile(r"limit set to", re.IGNORECASE)


def report_outcome(reports: list[pytest.TestReport]) -> tuple[str, str]:
    """Fold a test's phase reports into one outcome and the failure's first line."""
    for report in reports:
        if report.failed:
            return "failed", first_line(report)
    for report in reports:
        if report.skipped:
            return "skipped", first_line(report)
    return "passed", ""


def internal_error_cause(excinfo: pytest.ExceptionInfo[BaseException]) -> dict[str, str]:
    """An INTERNALERROR's exception (`Type: first line`) and its innermost frame in the
    suite's own code (else the last frame) as `path:line in function`."""
    exc = excinfo.value
    lines = str(exc).strip().splitlines()
    message = type(exc).__name__ + (f": {lines[0]}" if lines else "")
    frames = [(e.path, e.lineno + 1, e.name) for e in excinfo.traceback]
    own = [f for f in frames if not any(d in str(f[0]) for d in (*SITE_DIRS, "<"))]
    path, line, name = (own or frames or [("?", 0, "?")])[-1]
    with contextlib.suppress(ValueError):
        path = Path(path).relative_to(Path.cwd())
    return {"message": message[:MESSAGE_LIMIT], "where": f"{path}:{line} in {name}"}


def innermost_own(report: pytest.TestReport | pytest.CollectReport) -> str:
    """`path:line` of the innermost traceback entry in the suite's own code, or "": from
    pytest's structured traceback, else from the text it gives some collection errors as."""
    traceback = getattr(report.longrepr, "reprtraceback", None)
    entries = getattr(traceback, "reprentries", None) or ()
    places = [
        (str(getattr(loc, "path", "")), getattr(loc, "lineno", 0))
        for entry in entries
        if (loc := getattr(entry, "reprfileloc", None)) is not None
    ]
    if not entries:  # `ImportError while importing test module ...`: text only
        frames = map(_FRAME.match, str(report.longrepr or "").splitlines())
        places = [(m[1], int(m[2])) for m in frames if m]
    for path, line in reversed(places):
        if path and not path.startswith("<") and not any(d in path for d in SITE_DIRS):
            return f"{path}:{line}"[:MESSAGE_LIMIT]
    return ""


def first_line(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The first line that says what went wrong (or why the test was skipped)."""
    longrepr = report.longrepr
    text = ""
    if isinstance(longrepr, tuple):  # a skip, a file's too: (path, lineno, reason)
        lines = str(longrepr[2]).removeprefix("Skipped: ").strip().splitlines()
        return lines[0][:MESSAGE_LIMIT] if lines else ""
    if longrepr is not None:
        crash = getattr(longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(longrepr).strip()
        if not text:
            text = str(longrepr).strip()
        if report.when in ("setup", "teardown"):
            text = f"error in {report.when}: {text}"
    lines = [line for line in text.splitlines() if line.strip()]
    if report.when == "collect" and lines:
        # collection errors print a whole traceback; its last line names the error, and
        # its innermost frame in the suite's own code says where
        where = innermost_own(report)
        text = lines[-1].removeprefix("E").strip()
        return (f"{text} ({where})" if where else text)[:MESSAGE_LIMIT]
    return lines[0][:MESSAGE_LIMIT] if lines else ""


def pool_limited(message: str) -> bool:
    """Whether a failure's message says it ran out of memory under a pool limit its own
    process set (in-process state, not another process holding the device)."""
    return bool(OUT_OF_MEMORY.search(message)) and bool(POOL_LIMIT.search(message))


def out_of_device_memory(message: str) -> bool:
    """Whether a failure's message says the device ran out of memory (not a pool limit)."""
    return bool(OUT_OF_MEMORY.search(message)) and not POOL_LIMIT.search(message)
