"""Every Python started with this folder on its PYTHONPATH and CPU_PER_TEST_STARTS set appends
one JSON line to that file as it exits normally: its argv, its own CPU seconds, whether it
held (GPUCI_HOLD) and what it was asked to run (GPUCI_ONLY). With CPU_PER_TEST_VERBOSE=1 it
also writes a line as it starts: an interpreter killed before it exits (one started ahead
and never taken, a crash, a timeout) has a start and no exit. See test-suite-cpu.md."""

import os
import sys

_LOG = os.environ.get("CPU_PER_TEST_STARTS")
if _LOG:
    import atexit
    import json
    import resource

    def _write(line: dict[str, object]) -> None:
        try:
            # open(), not pathlib: every Python imports this, and pathlib is not cheap
            with open(_LOG, "a", encoding="utf-8") as log:  # noqa: PTH123
                log.write(json.dumps(line) + "\n")
        except OSError:
            pass

    def _env(name: str) -> str:
        return os.environ.get(name, "")

    if _env("CPU_PER_TEST_VERBOSE") == "1":
        _write(
            {
                "pid": os.getpid(),
                "start": 1,
                "orig": sys.orig_argv[:12],
                "only": _env("GPUCI_ONLY"),
                "journal": _env("GPUCI_JOURNAL"),
            }
        )

    def _exited() -> None:
        used = resource.getrusage(resource.RUSAGE_SELF)
        _write(
            {
                "pid": os.getpid(),
                "orig": sys.orig_argv[:12],
                "hold": _env("GPUCI_HOLD"),
                "cpu": round(used.ru_utime + used.ru_stime, 3),
                "only": _env("GPUCI_ONLY"),
            }
        )

    atexit.register(_exited)
