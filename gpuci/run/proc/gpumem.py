"""GPU memory: each interpreter's peak device memory, and whether a slot may start a file.

`sampler()` is one thread per gpuci command that, while interpreters run, asks NVML
(pynvml, where gpuci can import it) or else `nvidia-smi --query-compute-apps` which
processes hold how much device memory on which GPU, every SAMPLE_S; an interpreter's peak
is the most its session (it and what it started) held at once, and its GPUs those it held
memory on (a file that held one only may have a strict evidence run on that GPU while
others run on theirs). Without either, or where the driver lists pids this /proc does not
know (a container), there is no peak: run.json says null.

With peaks from an earlier run (`read_peaks`), `MemoryGate.wait` holds a slot back until
the first GPU it sees has the file's peak free, with a margin (`may_start`), beside what
the files it admitted before may still take; without one, or with nothing else of
gpuci's running, it starts at once.
"""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from gpuci.formats import read_mode_run
from gpuci.model import GpuciError, Mode
from gpuci.run.disk.durations import is_durations_file, read_durations_file
from gpuci.run.proc.holders import gpu_processes, gpu_uuids
from gpuci.run.proc.reaper import forget_child, session_of, start_child
from gpuci.run.proc.supervisor import Supervisor

SAMPLE_S = 0.5  # between two samples of every process's device memory
MARGIN_FRACTION = 0.10  # a file may need a little more than it did last time
MARGIN_MIB = 256  # and the CUDA context and its allocator's slack
WAIT_S = 0.5  # between two looks at a GPU's free memory while a slot waits
EARLIER = (Mode.ISOLATED, Mode.PARALLEL)  # the modes whose files ran one per interpreter
Usage = dict[int, dict[str, int]]  # pid -> GPU -> MiB of device memory it holds there now


def may_start(need_mib: int | None, free_mib: float | None, *, others_running: bool) -> bool:
    """Whether a slot may start a file whose interpreter peaked at `need_mib` last time.

    Unknown need or free memory: yes (an out-of-memory failure is then a suspect like any
    other). Nothing else of gpuci's running: yes, waiting would free nothing.
    """
    if need_mib is None or free_mib is None or not others_running:
        return True
    return free_mib >= with_margin(need_mib)


def with_margin(peak_mib: int) -> float:
    """What a file that peaked at `peak_mib` last time may need now."""
    return peak_mib * (1 + MARGIN_FRACTION) + MARGIN_MIB


def read_peaks(path: Path) -> dict[str, int]:
    """Per-file peak device memory (MiB) from an earlier run: a check's durations.json, a
    run.json or a mode directory."""
    if is_durations_file(path):
        return dict(read_durations_file(path).peaks)
    candidates = (
        [path] if path.is_file() else [*path.glob("run.json"), *path.glob("shard-*/run.json")]
    )
    peaks: dict[str, int] = {}
    for candidate in sorted(candidates):
        for file_run in read_mode_run(candidate).files:
            seen = [i.gpu_peak_mib for i in file_run.interpreters if i.gpu_peak_mib is not None]
            if seen:
                peaks[file_run.file] = max(seen)
    return peaks


def earlier_peaks(durations: Path | None, out: Path) -> dict[str, int]:
    """Peaks from --durations, else from an earlier isolated or parallel run in OUT; {}."""
    places = [durations] if durations is not None else [out / m.value for m in EARLIER]
    for place in places:
        with contextlib.suppress(GpuciError, OSError):  # unreadable: start freely
            if peaks := read_peaks(place):
                return peaks
    return {}


def screen_peaks(out: Path) -> dict[str, int]:
    """Each file's highest peak in OUT's isolated and parallel runs (a lazy isolated pass
    ran few files: parallel's peaks stand for the rest)."""
    peaks: dict[str, int] = {}
    for mode in EARLIER:
        with contextlib.suppress(GpuciError, OSError):  # unreadable: nothing known
            for file, peak in read_peaks(out / mode.value).items():
                peaks[file] = max(peak, peaks.get(file, 0))
    return peaks


def narrow_files(out: Path) -> set[str]:
    """The files that held memory on one GPU at most in every interpreter of OUT's isolated
    and parallel runs that was measured (none of theirs unmeasured): a strict evidence run
    of one of them has its GPU to itself while others run on theirs."""
    widths: dict[str, list[int | None]] = {}
    for mode in EARLIER:
        with contextlib.suppress(GpuciError, OSError):  # unreadable: nothing known
            place = out / mode.value
            for candidate in sorted([*place.glob("run.json"), *place.glob("shard-*/run.json")]):
                for file_run in read_mode_run(candidate).files:
                    held = widths.setdefault(file_run.file, [])
                    held.extend(i.gpus_held for i in file_run.interpreters)
    return {f for f, held in widths.items() if held and all(h is not None and h <= 1 for h in held)}


class _Nvml:
    """Device memory per process and free per GPU, from pynvml; None where not importable."""

    def __init__(self) -> None:
        import pynvml  # type: ignore[import-not-found,unused-ignore]

        pynvml.nvmlInit()
        self.nvml: Any = pynvml

    def usage(self) -> Usage:
        found: Usage = {}
        nvml = self.nvml
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used = proc.usedGpuMemory or 0  # None where the driver will not say
                held = found.setdefault(proc.pid, {})
                held[str(index)] = held.get(str(index), 0) + used // (1 << 20)
        return found

    def free_mib(self, device: str) -> int | None:
        nvml = self.nvml
        with contextlib.suppress(Exception):  # an unknown index or UUID: no answer
            handle = (
                nvml.nvmlDeviceGetHandleByIndex(int(device))
                if device.isdigit()
                else nvml.nvmlDeviceGetHandleByUUID(device)
            )
            return int(nvml.nvmlDeviceGetMemoryInfo(handle).free // (1 << 20))
        return None


class _NvidiaSmi:
    """The same from nvidia-smi, one call each."""

    def usage(self) -> Usage:
        found: Usage = {}
        for holder in gpu_processes():
            held = found.setdefault(holder.pid, {})
            held[holder.gpu_uuid] = held.get(holder.gpu_uuid, 0) + (holder.used_mib or 0)
        return found

    def free_mib(self, device: str) -> int | None:
        uuids = gpu_uuids() or {}
        index = next((i for i, u in uuids.items() if u == device), device)
        try:
            child = start_child(
                lambda: subprocess.Popen(
                    [
                        "nvidia-smi",
                        f"--id={index}",
                        "--query-gpu=memory.free",
                        "--format=csv,noheader,nounits",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )
        except OSError:
            return None
        try:
            out, _ = child.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            return None
        finally:
            forget_child(child.pid)
        text = out.strip()
        return int(text) if child.returncode == 0 and text.isdigit() else None


def _source() -> _Nvml | _NvidiaSmi | None:
    with contextlib.suppress(Exception):  # no pynvml, no NVML library, no driver
        return _Nvml()
    if gpu_uuids() is not None:
        return _NvidiaSmi()
    return None


class DeviceUse(NamedTuple):
    """What an interpreter held on the GPUs: its peak, and on how many GPUs it held memory
    (both None where it was never seen on one)."""

    peak_mib: int | None
    gpus: int | None


class PeakSampler:
    """Samples device memory per process while interpreters run; their peaks by pid."""

    def __init__(self, source: _Nvml | _NvidiaSmi | None) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._peaks: dict[int, int | None] = {}  # interpreter pid -> most MiB at once
        self._gpus: dict[int, set[str]] = {}  # interpreter pid -> the GPUs it held memory on
        self._thread: threading.Thread | None = None

    def watch(self, pid: int) -> None:
        """Start following an interpreter (its pid is its session)."""
        if self.source is None:
            return
        with self._lock:
            self._peaks[pid] = None
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="gpuci-gpumem", daemon=True)
                self._thread.start()

    def done(self, pid: int) -> DeviceUse:
        """Stop following it; its peak in MiB and its GPUs, None where never seen on one."""
        with self._lock:
            peak, gpus = self._peaks.pop(pid, None), self._gpus.pop(pid, set())
            return DeviceUse(peak, len(gpus) if peak is not None else None)

    def seen(self, pid: int) -> int:
        """The most MiB the interpreter `pid` held at once so far (0: none seen)."""
        with self._lock:
            return self._peaks.get(pid) or 0

    def record(self, usage: Usage, sessions: Mapping[int, int | None]) -> None:
        """Add one sample: per process and GPU MiB, and each process's session."""
        with self._lock:
            for interpreter, peak in self._peaks.items():
                held = [by_gpu for pid, by_gpu in usage.items() if sessions.get(pid) == interpreter]
                if held:
                    self._peaks[interpreter] = max(peak or 0, sum(sum(h.values()) for h in held))
                    self._gpus.setdefault(interpreter, set()).update(g for h in held for g in h)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._peaks:
                    self._thread = None
                    return
            assert self.source is not None
            with contextlib.suppress(Exception):  # a driver hiccup costs one sample
                usage = self.source.usage()
                self.record(usage, {pid: session_of(pid) for pid in usage})
            time.sleep(SAMPLE_S)


_sampler: PeakSampler | None = None
_sampler_lock = threading.Lock()


def sampler() -> PeakSampler:
    """The sampler of this gpuci command (one source looked up once)."""
    global _sampler  # noqa: PLW0603 -- one per process, like the driver it asks
    with _sampler_lock:
        if _sampler is None:
            _sampler = PeakSampler(_source())
        return _sampler


@dataclass(slots=True, kw_only=True)
class _Kept:
    """Device memory kept for one admitted file: on which GPU, how much, by which pid."""

    device: str
    mib: float
    pid: int | None = None  # None until its interpreter started


class MemoryGate:
    """Holds a slot back until its GPU has room for the file it is about to start.

    Memory is kept for a file from its admission to its interpreter's end, less what the
    sampler saw it hold so far (a free-memory reading alone would let two big files that
    start at the same moment both in: neither holds anything yet)."""

    def __init__(
        self,
        peaks: Mapping[str, int],
        free_mib: Callable[[str], int | None] | None = None,
        held_mib: Callable[[int], int] | None = None,
    ) -> None:
        self.peaks = dict(peaks)
        source = _source() if peaks and free_mib is None else None
        self.free_mib = free_mib or (source.free_mib if source is not None else None)
        self.held_mib = held_mib or (lambda pid: sampler().seen(pid))
        self._lock = threading.Lock()
        self._kept: dict[int, _Kept] = {}  # by ticket: the files admitted, until they end
        self._tickets = itertools.count(1)

    def wait(self, key: str, gpus: str | None, supervisor: Supervisor) -> int | None:
        """Return once the first GPU of `gpus` has the file's peak free beside what the
        files admitted before it may still take (or waiting is moot); a ticket for
        `started` and `done` where memory is kept for it, else None."""
        need = self.peaks.get(key)
        if need is None or self.free_mib is None:
            return None
        device = (gpus or "0").split(",")[0].strip()  # the device a test uses by default
        while not supervisor.stopping.is_set():
            with self._lock:
                free = self.free_mib(device)
                room = None if free is None else free - self._still_to_take(device)
                if may_start(need, room, others_running=supervisor.running() > 0):
                    ticket = next(self._tickets)
                    self._kept[ticket] = _Kept(device=device, mib=with_margin(need))
                    return ticket
            time.sleep(WAIT_S)
        return None

    def started(self, ticket: int | None, pid: int) -> None:
        """The admitted file's interpreter is `pid`: what it holds is counted as it grows."""
        with self._lock:
            kept = self._kept.get(ticket or 0)
            if kept is not None:
                kept.pid = pid

    def done(self, ticket: int | None) -> None:
        """The admitted file's interpreter ended: nothing kept for it any more."""
        with self._lock:
            self._kept.pop(ticket or 0, None)

    def _still_to_take(self, device: str) -> float:
        """What the files admitted on `device` may still take beyond what they hold now."""
        return sum(
            max(0.0, k.mib - (self.held_mib(k.pid) if k.pid is not None else 0))
            for k in self._kept.values()
            if k.device == device
        )
