"""Processes outside the tests: those an interpreter left behind (which gpuci ended), and
strangers holding memory on a GPU. Shared like the model, whose file runs record them, and
written to run.json in the form their `to_json` gives."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Leftover:
    """A process an interpreter left behind, which gpuci ended."""

    pid: int
    cmdline: str  # shlex-joined, capped
    age_s: float  # how long it had run when gpuci found it
    killed: bool  # it outlived SIGTERM and the grace period: SIGKILL ended it

    def to_json(self) -> dict[str, Any]:
        """The run.json form."""
        return {**dataclasses.asdict(self), "age_s": round(self.age_s, 3)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Leftover:
        """Read the run.json form back."""
        pid, cmdline, age_s, killed = data["pid"], data["cmdline"], data["age_s"], data["killed"]
        return cls(pid=int(pid), cmdline=str(cmdline), age_s=float(age_s), killed=bool(killed))


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuProcess:
    """A process holding memory on one GPU, as nvidia-smi lists it."""

    pid: int
    used_mib: int | None  # None: nvidia-smi could not say ([N/A])
    gpu_uuid: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Stranger(GpuProcess):
    """A process that gpuci does not run, holding memory on a GPU."""

    cmdline: str  # "" where unreadable: gone, another user's, another pid namespace's
    preexisting: bool  # it ran before the check began; if not, it came during the check

    def to_json(self) -> dict[str, Any]:
        """The run.json form."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Stranger:
        """Read the run.json form back."""
        used = data.get("used_mib")
        return cls(
            pid=int(data["pid"]),
            used_mib=None if used is None else int(used),
            gpu_uuid=str(data.get("gpu_uuid", "")),
            cmdline=str(data.get("cmdline", "")),
            preexisting=bool(data.get("preexisting", False)),
        )
