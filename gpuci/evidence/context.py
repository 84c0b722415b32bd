"""The evidence's context: what every kind of evidence and the functions it calls read,
the same for the whole check's evidence, as one frozen object instead of the parameters
each of them once took one by one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

from gpuci.evidence.orders import Order
from gpuci.evidence.probe import Prober
from gpuci.evidence.results import ModeResults
from gpuci.model import Mode
from gpuci.state.left import Ledger


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """The check's evidence as every kind reads it."""

    prober: Prober  # the one runner: every run, started ahead, admitted, within the budget
    results: Mapping[Mode, ModeResults]  # the screens' results
    orders: Mapping[Mode, Order]  # who ran before whom in each screen's interpreters
    progress: TextIO  # where each run's line is told
    ledger: Ledger  # what each test and file left behind (the state ledger)
