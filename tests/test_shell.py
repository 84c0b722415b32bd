"""`gpuci.shell`: every word gpuci prints in a command is one printable line that bash
hands back byte for byte."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from gpuci import shell
from gpuci.model import printable

WORDS = [
    "plain.py::test_x",
    "test_p[a\nb]",
    'it\'s $HOME `id` "q"',
    "back\\slash \\n",
    "ünïcödé",
    "\u202eevil\u2066",
    "tab\there\r",
    "\x1b[31mred\x7f\x85",
    "-lead [x]",
    "\x01\x0ab",  # an escape followed by what reads as a hex digit
    "test_\udcff.py",  # an undecodable byte of a file name, as Python holds it
    "",
]


@pytest.mark.parametrize("word", WORDS)
def test_bash_reads_each_word_back_byte_for_byte(word: str) -> None:
    quoted = shell.quote(word)
    assert printable(quoted) == quoted, quoted  # one line, nothing a terminal would hide
    shown = subprocess.run(
        ["bash", "-c", f"printf %s {quoted}"], capture_output=True, check=True
    ).stdout
    assert shown == word.encode("utf-8", "surrogateescape"), (quoted, shown)


def test_a_printable_word_is_quoted_as_shlex_quotes_it() -> None:
    for word in ("plain.py::test_x", "it's $HOME", "ünï [x]"):
        assert shell.quote(word) == shlex.quote(word)
    assert shell.join(["python", "a b", "c\nd"]) == "python 'a b' $'c\\nd'"
