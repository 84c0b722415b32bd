"""Steps: a culprit search's runs against its bound, as evidence.json records them.

A search over n candidates halves them in ceil(log2 n) levels of one counted run each, then
confirms (`gpuci.evidence.search.bisect`); over tests of several files it
halves the files first, then the tests of the one file kept: ceil(log2 files) + ceil(log2
tests in that file) levels (`gpuci.evidence.search.by_files`). Its levels may
run in waves of speculated runs, whose losers are killed and never counted
(`gpuci.evidence.search.waves`). The record says the bound, what the search
took, and what speculation cost, so that a benchmark can hold it to them. Shared like the
model (which holds it in each test's evidence), and imports nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# past the levels: the inferred last candidate's run, the confirmation, and the strict run
# that tells a flaky victim from a load's doing where the confirmation goes the other way
CONFIRMING = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Steps:
    """A culprit search's runs against its bound (`gpuci.evidence.search.bisect`)."""

    n: int  # the candidates the halving searched among
    bound: int  # ceil(log2 n) levels and their confirmations: the most runs it should take
    runs: int  # the halving's runs and its confirmations', counted (not `tries`, not losers)
    waves: int  # times the search waited for runs started together (one alone is a wave)
    ahead: int = 0  # runs started before the level above them answered (speculated)
    losers: int = 0  # speculated runs whose answer the search did not need, never counted
    killed: int = 0  # of them, those still running when the search knew: killed
    tries: int = 0  # runs before the halving: an earlier victim's culprits, collected files
    files: int = 0  # searched by files first: the files halved (0: the tests were halved)
    in_file: int = 0  # then the tests of the file kept, before the victim
    checked: int = 0  # of the bound, the checked stage's where the file halving was refuted

    def to_json(self) -> dict[str, int]:
        """The evidence.json form."""
        return {
            "n": self.n,
            "bound": self.bound,
            "runs": self.runs,
            "waves": self.waves,
            "ahead": self.ahead,
            "losers": self.losers,
            "killed": self.killed,
            "tries": self.tries,
            "files": self.files,
            "in_file": self.in_file,
            "checked": self.checked,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Steps:
        """Read the JSON form back."""
        return cls(
            n=int(data["n"]),
            bound=int(data["bound"]),
            runs=int(data["runs"]),
            waves=int(data["waves"]),
            ahead=int(data.get("ahead", 0)),
            losers=int(data.get("losers", 0)),
            killed=int(data.get("killed", 0)),
            tries=int(data.get("tries", 0)),
            files=int(data.get("files", 0)),
            in_file=int(data.get("in_file", 0)),
            checked=int(data.get("checked", 0)),
        )
