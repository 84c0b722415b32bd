"""A driver segfault kills the interpreter; the test after it must still run."""

from __future__ import annotations

import fakegpu


def test_load_truncated_module() -> None:
    # The process dies of SIGSEGV here: no exception, no report from pytest.
    fakegpu.load_module(b"\x7fEL")


def test_load_module() -> None:
    fakegpu.load_module(fakegpu.ELF_MAGIC + b"\x02\x01\x01")
