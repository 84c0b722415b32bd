"""The names by which gpuci and the interpreters it holds or pairs talk: read on both sides.

gpuci itself imports these, the plugin's waits (`gpuci.run.proc.waits`) act on them: kept
apart so that gpuci, which starts the suite interpreter first thing, never imports pytest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

RENDEZVOUS_WAIT_S = 60.0  # a partner that never gets there does not hold the other forever
POLL_S = 0.01  # how often a waiting side looks again
HOLD_ENV = "GPUCI_HOLD"  # "1": hold after collection until GPUCI_ONLY's file appears


def asked_json(ids: Sequence[str] | None, rendezvous: str | None = None) -> str:
    """GPUCI_ONLY's file: the ids to run (None: every test collected), and where a pair's
    interpreters meet ("FOLDER:N": the first test waits until N got there). Handed over when
    the tests start, not at the interpreter's start: one started ahead may be paired."""
    asked = None if ids is None else list(ids)
    return json.dumps(asked if rendezvous is None else {"ids": asked, "rendezvous": rendezvous})


def read_asked(text: str) -> tuple[list[str] | None, str | None]:
    """`asked_json`'s ids and rendezvous, read back."""
    asked: Any = json.loads(text)
    if isinstance(asked, dict):
        return asked.get("ids"), asked.get("rendezvous")
    return asked, None
