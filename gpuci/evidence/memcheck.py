"""memcheck's output, read: the first error block compute-sanitizer printed (the kind of
access, the kernel, the thread, the address, the host frames that name someone's code),
and its error count, kept short for the report (`gpuci.evidence.sanitizer` runs it).

Untrusted text, kept as data: the report escapes it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# A failure message that says the GPU faulted (CUDA runtime, driver, PyTorch wording).
CUDA_FAULT = re.compile(
    r"illegal (?:memory )?(?:address|access|instruction)|unspecified launch failure"
    r"|misaligned address|hardware stack error|invalid program counter"
    r"|cudaError(?:IllegalAddress|LaunchFailure|MisalignedAddress|IllegalInstruction"
    r"|HardwareStackError|InvalidAddressSpace|InvalidPc)"
    r"|CUDA_ERROR_(?:ILLEGAL_ADDRESS|LAUNCH_FAILED|MISALIGNED_ADDRESS|ILLEGAL_INSTRUCTION"
    r"|HARDWARE_STACK_ERROR|INVALID_ADDRESS_SPACE|INVALID_PC)",
    re.IGNORECASE,
)
# memcheck's line prefix: exactly nine `=` (pytest's banners run longer, or end in `=`)
_PREFIX = re.compile(r"(?<!=)={9}(?!=) ?(.*)$")
_SUMMARY = re.compile(r"^ERROR SUMMARY: ([\d,]+) errors?$", re.IGNORECASE)  # not "...not printed"
_DETAIL = re.compile(
    r"^(?:at |by thread|Address |Access |and is |Saved host backtrace|Host Frame|Device Frame"
    r"|Python Frame|in )",
    re.IGNORECASE,
)
_NOT_ERRORS = re.compile(
    r"^(?:COMPUTE-SANITIZER|CUDA-MEMCHECK|ERROR SUMMARY|LEAK SUMMARY|Note:|Warning:"
    r"|Target application returned an error)",
    re.IGNORECASE,
)
_FRAME = re.compile(r"^(?:Host|Device|Python) Frame: ?", re.IGNORECASE)
# Host frames that say nothing about whose code launched the kernel.
_NOISE_MODULE = re.compile(
    r"libcuda\.so|libcudart|libpython|libc\.so|ld-linux|libffi|\bin (?:\S*/)?python[\d.]*$"
    r"|/_pytest/|/pluggy/|runpy\.py|<frozen |gpuci/pytest_plugin\.py",
    re.IGNORECASE,
)
_NOISE_SYMBOL = re.compile(
    r"^(?:\[0x|_?Py|_?py_|ffi_|_ctypes|_call_function_pointer|__libc_start|_start\b|main\b"
    r"|cudaLaunchKernel|cuLaunchKernel|__cudart|libcudart_static|slot_tp_|method_vectorcall"
    r"|cfunction_|vectorcall|builtin_|call_function|function_code_fastcall|\(|\S*/python\S* )"
)
_PYTHON_SOURCE = re.compile(r"\.py(?::\d+|\b)")
# a test function's frame (`test_scatter_rows in test_write_past_end.py:32`), and a test file's
_TEST_FUNCTION = re.compile(r"Frame: test\w* in ")
_TEST_FILE = re.compile(r"Frame: \S+ in (?:\S*/)?(?:test_\w*|\w*_test)\.py\b")
MAX_LINES = 15
MAX_CHARS = 1500
MAX_LINE_CHARS = 240  # a C++ template's name can run to pages
MAX_FRAMES = 5
MAX_PYTHON_FRAMES = 3  # of them, the test's own (the test function and what it called)
SIGNATURE_CHARS = 40  # longer argument or template lists are cut to `(…)`
MAX_SCAN_CHARS = 4000  # read of one line: what is shown is far shorter anyway


@dataclass(frozen=True, slots=True, kw_only=True)
class Memcheck:
    """What one memcheck run printed: its first error block and its error count."""

    block: tuple[str, ...]  # the chosen error block's lines, prefixes gone; () if none
    errors: int | None  # the ERROR SUMMARY counts added up; None where none was printed


def is_cuda_fault(message: str) -> bool:
    """Whether a failure message says the GPU faulted (an illegal address, a launch failure)."""
    return CUDA_FAULT.search(message) is not None


def parse_memcheck(output: str) -> Memcheck:
    """memcheck's first error block in an interpreter's output, and its error count.

    A memory access error (or a hardware exception) comes first; then an API call that
    returned a CUDA fault; then any other API error; then whatever else the tool
    reported (`Error: ...`). Its lines lose memcheck's prefix; host frames keep only
    those that name someone's code (the test, CuPy's launch), not the driver's or
    Python's own.
    """
    blocks: list[list[str]] = []
    errors: int | None = None
    current: list[str] | None = None
    for raw in output.splitlines():
        match = _PREFIX.search(raw)
        if match is None:
            continue
        content = match.group(1).rstrip()
        if content.endswith("="):  # a pytest banner that happens to hold nine `=`
            continue
        text = content.strip()[:MAX_SCAN_CHARS]
        summary = _SUMMARY.match(text)
        if summary:
            errors = (errors or 0) + int(summary.group(1).replace(",", ""))
        if not text or _NOT_ERRORS.match(text):
            current = None
            continue
        if content[:1].isspace() or _DETAIL.match(text):  # a detail of the error above
            if current is None:
                continue
            if text.lower().startswith("in ") and _FRAME.match(current[-1]):
                current[-1] += f" {text}"  # older tools: a frame's module on its own line
            else:
                current.append(text)
            continue
        current = [text]
        blocks.append(current)
    if not blocks:
        return Memcheck(block=(), errors=errors)
    chosen = min(blocks, key=_rank)  # min keeps the first of equal rank
    return Memcheck(block=tuple(_keep(chosen)), errors=errors)


def _rank(block: Sequence[str]) -> int:
    head = block[0]
    if head.startswith("Error") or head.startswith("Leaked"):
        return 3
    if head.startswith("Program hit"):
        return 1 if is_cuda_fault(head) else 2
    return 0


def _keep(block: Sequence[str]) -> list[str]:
    """The error line and its details; of the frames, the few that name someone's code:
    the test's own Python frames (the test, its file and line) and the native ones left
    when the driver's, the runtime's and the interpreter's are gone (CuPy's launch)."""
    lines: list[str] = []
    native: list[tuple[int, str]] = []
    python: list[tuple[int, str]] = []
    for position, line in enumerate(block):
        kind = _FRAME.match(line)
        if kind is None:
            if line.startswith("at "):
                lines.append(shorten_signature(line))
            elif not line.lower().startswith("saved "):  # "Saved host backtrace up to ..."
                lines.append(line)
            continue
        frame = line[kind.end() :].strip()
        if frame and not _noise(frame):
            shown = (position, f"{kind.group(0).rstrip(': ')}: {shorten_signature(frame)}")
            (python if _PYTHON_SOURCE.search(frame) else native).append(shown)
    mine = _own_python(python)
    chosen = mine + native[: MAX_FRAMES - len(mine)]
    return lines + [line for _, line in sorted(chosen)]


def _own_python(frames: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """Python frames, innermost first, up to the test function: pytest's own come after it."""
    for pattern in (_TEST_FUNCTION, _TEST_FILE):  # the test itself, else the last in its file
        found = [i for i, (_, line) in enumerate(frames) if pattern.search(line)]
        if found:
            last = found[0] if pattern is _TEST_FUNCTION else found[-1]
            return list(frames[max(0, last + 1 - MAX_PYTHON_FRAMES) : last + 1])
    return list(frames[: MAX_PYTHON_FRAMES - 1])  # no test frame (a fixture?): the innermost


def shorten_signature(text: str) -> str:
    """C++ argument and template lists longer than a few words cut to `(…)`, `<…>`."""
    pairs = {"(": ")", "<": ">"}
    text = text[:MAX_SCAN_CHARS]  # the bracket search is quadratic in the worst case
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        close = pairs.get(char)
        end = _matching(text, i, char, close) if close else -1
        if close and end > 0 and end - i - 1 > SIGNATURE_CHARS:
            out.append(f"{char}…{close}")
            i = end + 1
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _matching(text: str, start: int, opening: str, closing: str) -> int:
    """Where the bracket opened at `start` closes; -1 where it never does."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _noise(frame: str) -> bool:
    return bool(_NOISE_MODULE.search(frame) or _NOISE_SYMBOL.match(frame))


def cap_lines(lines: Sequence[str], notes: Sequence[str] = ()) -> str:
    """At most MAX_LINES lines of MAX_LINE_CHARS, MAX_CHARS in all, `notes` always last."""
    notes = [_short(n) for n in notes]
    kept: list[str] = []
    total = sum(len(n) + 1 for n in notes)
    for line in lines[: MAX_LINES - len(notes)]:
        short = _short(line)
        if total + len(short) + 1 > MAX_CHARS:
            break
        kept.append(short)
        total += len(short) + 1
    return "\n".join([*kept, *notes])


def _short(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"
