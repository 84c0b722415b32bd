"""A child's output on disk, capped: the head and the tail are kept, a flood is counted."""

from __future__ import annotations

import os
from pathlib import Path

LOG_HEAD_BYTES = 2 << 20  # keep the first 2 MiB of each interpreter's output...
LOG_TAIL_BYTES = 1 << 20  # ...and the last 1 MiB; a flood in between is counted, not kept
LOG_EXCERPT_CHARS = 3000  # of a crashed or hung interpreter's output, kept in run.json
EXCERPT_SEARCH_BYTES = 32 << 10  # where to look for the fatal-error banner
EXCERPT_MAX_CHARS = 8000  # a faulthandler dump of many threads can run long
FATAL_BANNER = "Fatal Python error"


class CappedLog:
    """A child's output on disk: the head and the tail, never more than the cap."""

    def __init__(self, path: Path, header: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("ab")
        self._file.write(header.encode())
        self._head_left = LOG_HEAD_BYTES
        self._tail = bytearray()
        self._dropped = 0

    def write(self, data: bytes) -> None:
        """Keep the start of the output on disk, and only the latest bytes after it."""
        if self._head_left > 0:
            head = data[: self._head_left]
            self._file.write(head)
            self._head_left -= len(head)
            data = data[len(head) :]
        if data:
            self._tail += data
            excess = len(self._tail) - LOG_TAIL_BYTES
            if excess > 0:
                del self._tail[:excess]
                self._dropped += excess

    def excerpt(self) -> str:
        """The end of the output, from Python's fatal-error banner when there is one."""
        data = bytes(self._tail[-EXCERPT_SEARCH_BYTES:]) if self._tail else self._last_head()
        text = data.decode("utf-8", "replace")
        banner = text.rfind(FATAL_BANNER)
        if banner >= 0:
            return text[banner:][:EXCERPT_MAX_CHARS]
        return text[-LOG_EXCERPT_CHARS:]

    def _last_head(self) -> bytes:
        self._file.flush()
        with Path(self._file.name).open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - EXCERPT_SEARCH_BYTES))
            return f.read()

    def close(self) -> None:
        """Write the kept tail after a note of what was dropped."""
        if self._dropped:
            self._file.write(f"\n[gpuci: {self._dropped} bytes of output omitted]\n".encode())
        self._file.write(bytes(self._tail))
        self._file.close()
