"""What the fork server's parent makes of the GPU libraries: imported, refused (and why),
the environment variables their imports read, the generators they seeded, and how long.
Run in the suite's Python: `python scripts/device_audit.py numpy scipy cupy torch`."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from gpuci.run.discover import child_env
from gpuci.run.forkserver import ForkServer


def main(modules: list[str]) -> None:
    """Start a parent that preloads `modules`; print what it did."""
    root = Path(tempfile.mkdtemp(prefix="gpuci-audit-"))
    started = time.monotonic()
    server = ForkServer(
        python=sys.executable, environ=child_env(os.environ), modules=modules, roots=[root]
    )
    try:
        usable = server.usable()
        ready = server.ready or {}
        print(f"usable: {usable} ({time.monotonic() - started:.1f}s) {server.failure or ''}")
        print("imported:", [m for m in ready.get("imported", []) if m in modules])
        print("refused:", ready.get("refused", {}))
        print("seeded:", ready.get("seeded", {}))
        reads = ready.get("reads", {})
        print(
            f"reads ({len(reads)}):", ", ".join(f"{k} ({v[1]})" for k, v in sorted(reads.items()))
        )
    finally:
        server.close()


if __name__ == "__main__":
    main(sys.argv[1:])
