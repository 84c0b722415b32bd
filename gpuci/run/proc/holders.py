"""GPU memory holders: who else holds memory on the GPUs gpuci uses, after each interpreter.

`gpu_processes()` asks nvidia-smi (only it: pynvml would add a path no test without a GPU
checks); `gpu_strangers()` keeps the holders gpuci does not run (`descendant_pids()`),
marking those that ran before the check (`snapshot_pids()`). In a container nvidia-smi may
list host pids, unknown to this /proc. Without nvidia-smi nothing is checked, and run.json
says so.
"""

from __future__ import annotations

import dataclasses
import functools
import subprocess
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuci.processes import GpuProcess, Stranger
from gpuci.run.proc.reaper import (
    command_line,
    descendant_pids,
    forget_child,
    is_visible,
    snapshot_pids,
    start_child,
)

NVIDIA_SMI_QUERY = "--query-compute-apps=pid,used_memory,gpu_uuid"
NVIDIA_SMI_GPUS = "--query-gpu=index,uuid"
NVIDIA_SMI_TIMEOUT_S = 10.0


def gpu_processes(nvidia_smi: str = "nvidia-smi") -> list[GpuProcess]:
    """The processes holding GPU memory now; none where nvidia-smi is missing or fails."""
    found: list[GpuProcess] = []
    for line in _nvidia_smi(nvidia_smi, NVIDIA_SMI_QUERY) or ():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue  # "No running processes found", or a format we do not know
        used = int(parts[1]) if parts[1].isdigit() else None
        found.append(GpuProcess(pid=int(parts[0]), used_mib=used, gpu_uuid=parts[2]))
    return found


def gpu_uuids(nvidia_smi: str = "nvidia-smi") -> dict[str, str] | None:
    """Index -> UUID of every GPU; None where nvidia-smi is missing or fails."""
    lines = _nvidia_smi(nvidia_smi, NVIDIA_SMI_GPUS)
    if lines is None:
        return None
    pairs = (line.split(",") for line in lines)
    return {p[0].strip(): p[1].strip() for p in pairs if len(p) == 2 and p[0].strip().isdigit()}


def _nvidia_smi(nvidia_smi: str, query: str) -> list[str] | None:
    """nvidia-smi's CSV lines for one query; None where it is missing, fails or hangs."""
    try:
        child = start_child(
            lambda: subprocess.Popen(
                [nvidia_smi, query, "--format=csv,noheader,nounits"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        )
    except OSError:  # missing
        return None
    try:
        out, _ = child.communicate(timeout=NVIDIA_SMI_TIMEOUT_S)
    except subprocess.TimeoutExpired:  # hung
        child.kill()
        child.communicate()
        return None
    finally:
        forget_child(child.pid)
    return out.splitlines() if child.returncode == 0 else None


def gpu_strangers(
    holders: Iterable[GpuProcess], *, before: frozenset[int], ours: frozenset[int]
) -> list[Stranger]:
    """The GPU memory holders that gpuci does not run, each with its command line."""
    return [
        Stranger(**dataclasses.asdict(h), cmdline=command_line(h.pid), preexisting=h.pid in before)
        for h in holders
        if h.pid not in ours
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuWatch:
    """The GPU check of one gpuci command: who held GPUs before it, and the GPUs' UUIDs."""

    before: frozenset[int]  # every pid, and every GPU memory holder, as the check began
    uuids: Mapping[str, str]  # GPU index -> UUID

    def strangers(
        self, visible: str | None, *, alone: bool, ended: Iterable[int] = ()
    ) -> list[Stranger]:
        """New holders of memory on the GPUs of `visible` (None: all) that gpuci does not run.

        `ended`: pids gpuci just ended (an interpreter, its leftovers), which the driver may
        list a moment longer. A pid this /proc does not show may be one of gpuci's seen
        from another pid namespace (a container): it counts only when `alone`, while no
        other interpreter of gpuci runs.
        """
        wanted = self._uuids(visible)
        holders = [h for h in gpu_processes() if wanted is None or h.gpu_uuid in wanted]
        ours = descendant_pids() | frozenset(ended)
        found = gpu_strangers(holders, before=self.before, ours=ours)
        return [s for s in found if not s.preexisting and (alone or is_visible(s.pid))]

    def _uuids(self, visible: str | None) -> set[str] | None:
        """The UUIDs of CUDA_VISIBLE_DEVICES; None (every GPU) where one is not known."""
        if not visible:
            return None
        found = set()
        for entry in (e.strip() for e in visible.split(",")):
            if entry in self.uuids:
                found.add(self.uuids[entry])
            elif entry.startswith("GPU-"):
                found.add(entry)
            else:  # a MIG instance, or an index nvidia-smi did not list
                return None
        return found


class StrangerCheck:
    """The GPU check after each interpreter of one mode; each stranger is reported once."""

    def __init__(self, watch: GpuWatch | None) -> None:
        self.watch = watch
        self._reported: set[int] = set()
        self._lock = threading.Lock()  # slots of a parallel mode check at once

    @property
    def method(self) -> str:
        """How GPU memory holders are checked, for run.json."""
        return "nvidia-smi" if self.watch is not None else "not checked: no nvidia-smi"

    def after(self, visible: str | None, *, alone: bool, ended: Iterable[int]) -> list[Stranger]:
        """The strangers on the GPUs of `visible` not reported before; none without a GPU check."""
        if self.watch is None:
            return []
        found = self.watch.strangers(visible, alone=alone, ended=ended)
        with self._lock:
            new = [s for s in found if s.pid not in self._reported]
            self._reported.update(s.pid for s in new)
        return new


@functools.cache
def gpu_watch() -> GpuWatch | None:
    """This process's GPU check, as of its first call; None where nvidia-smi is missing."""
    uuids = gpu_uuids()
    if uuids is None:
        return None
    before = snapshot_pids() | {h.pid for h in gpu_processes()}
    return GpuWatch(before=before, uuids=uuids)
