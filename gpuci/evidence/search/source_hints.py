"""What a failure's own words point at in the suite's source: the few tests before the
victim whose source writes a value its failure quotes.

Tests leave state no ledger sees, in the suite's own modules and the libraries it tests: a
schema registered by name (`Class with name 'PlantAddressSchema' was not found`), a default
message reworded (`assert ['This field is required.'] == [...]`), a type registered
(`assert None == 'application/x-bolton'`). The failure quotes the value; the test that
wrote (or, for a test that depends on others, would have written) it names it in its
source. Such a hint is tried first, like the ledger's, and only a hint: the search runs it
and narrows it, and halves every candidate where it does not show the failure.

A value is a pointer only where few tests write it: one that more than MAX_WRITERS of the
candidates name (`'float32'` in a GPU suite) points at none of them. pytest's shortened
reprs (`'Missing dat...uired field.'`) are no longer what any source wrote.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from pathlib import Path

MAX_WRITERS = 8  # of the candidates, the most that may share a value it points at
# a value in single or double quotes on one line: every one, so that a short one's quotes
# are not taken for the start of the next
_QUOTED = re.compile(r"'([^'\\\n]*)'|\"([^\"\\\n]*)\"")
QUOTED_LENGTHS = range(4, 201)  # shorter is a coincidence, longer no name a test wrote
SHORTENED = "..."  # pytest's repr of a long value, cut in its middle


def quoted_values(message: str) -> list[str]:
    """The values a failure's message quotes, in order, each once (not pytest's shortened
    ones, nor blank ones)."""
    values = (m[1] if m[1] is not None else m[2] for m in _QUOTED.finditer(message))
    return list(
        dict.fromkeys(
            v for v in values if len(v) in QUOTED_LENGTHS and v.strip() and SHORTENED not in v
        )
    )


def writers(candidates: Sequence[str], message: str, rootdir: Path) -> tuple[str, ...]:
    """Of `candidates` (test ids before the victim, in order), those whose source names a
    value the failure `message` quotes, where at most MAX_WRITERS do; in their order."""
    values = quoted_values(message)
    if not values:
        return ()
    sources = _Sources(rootdir, values)
    picked: set[str] = set()
    for value in values:
        naming = {c for c in candidates if value in sources.of(c)}
        if len(naming) <= MAX_WRITERS:  # a common value points at no one
            picked |= naming
    if len(picked) > MAX_WRITERS:
        return ()
    return tuple(c for c in candidates if c in picked)


class _Sources:
    """Test functions' source (decorators and all), read once per file, and only from
    files that name one of the values at all; each test's once, whatever the values."""

    def __init__(self, rootdir: Path, values: Sequence[str]) -> None:
        self.rootdir = rootdir
        self.values = values
        self.files: dict[str, tuple[list[str], dict[tuple[str, ...], tuple[int, int]]]] = {}
        self.tests: dict[str, str] = {}

    def of(self, test_id: str) -> str:
        if test_id not in self.tests:
            file, _, rest = test_id.partition("::")
            lines, spans = self._read(file)
            # `Class::test[param]`: the function's path in the file, without its parameters
            span = spans.get(tuple(rest.split("[", 1)[0].split("::")))
            self.tests[test_id] = "".join(lines[span[0] - 1 : span[1]]) if span else ""
        return self.tests[test_id]

    def _read(self, file: str) -> tuple[list[str], dict[tuple[str, ...], tuple[int, int]]]:
        if file not in self.files:
            self.files[file] = ([], {})
            try:
                text = (self.rootdir / file).read_text(encoding="utf-8", errors="replace")
                if any(v in text for v in self.values):
                    self.files[file] = (text.splitlines(keepends=True), _spans(ast.parse(text)))
            except (OSError, SyntaxError, ValueError):
                pass  # a file it cannot read or parse names nothing: no hint, no harm
        return self.files[file]


def _spans(tree: ast.Module) -> dict[tuple[str, ...], tuple[int, int]]:
    """Each function's and method's (first line with its decorators, last line), by its
    path of names (`("TestC", "test_m")`)."""
    spans: dict[tuple[str, ...], tuple[int, int]] = {}

    def walk(body: list[ast.stmt], path: tuple[str, ...]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                walk(node.body, (*path, node.name))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                named = (*path, node.name)
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                spans[named] = (first, node.end_lineno or node.lineno)

    walk(tree.body, ())
    return spans
