"""Shell words for the commands gpuci prints: each one pasteable into bash as one line.

`shlex.quote` keeps a newline, a tab or a bidirectional override as itself inside single
quotes: the command is then several lines, or shows other than it runs, and a terminal
that replaces controls (`gpuci.model.printable`) prints a command that selects nothing.
An argument holding such a character is written in bash's ANSI-C quoting instead
(`$'test_x.py::test_p[a\\nb]'`): the character as an escape, so the command is one
printable line and bash hands pytest the id byte for byte. Every other argument is
`shlex.quote`d, so the common command reads as before. A character that is not UTF-8 (a
file name's undecodable byte, which Python holds as a lone surrogate) is that byte again.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

# What a terminal would not show as itself: C0 and C1 controls, DEL, the bidirectional
# marks and overrides (as `gpuci.model.printable` replaces them), and lone surrogates.
_UNPRINTABLE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\", "'": "\\'"}


def quote(word: str) -> str:
    """`word` as one bash word that stays on one printable line."""
    if not _UNPRINTABLE.search(word):
        return shlex.quote(word)
    return "$'" + "".join(_escaped(char) for char in word) + "'"


def join(words: Iterable[str]) -> str:
    """`words` as one bash command line (`shlex.join`, with `quote`'s words)."""
    return " ".join(quote(word) for word in words)


def _escaped(char: str) -> str:
    """One character inside `$'...'`: itself where printable, else its bytes as `\\xHH`
    (UTF-8; a lone surrogate from an undecodable byte is that byte), which bash reads the
    same in every locale."""
    if char in _NAMED:
        return _NAMED[char]
    if not _UNPRINTABLE.match(char):
        return char
    data = char.encode("utf-8", "surrogateescape") if "\udc80" <= char <= "\udcff" else None
    if data is None:
        data = char.encode("utf-8", "surrogatepass")
    return "".join(f"\\x{byte:02x}" for byte in data)
