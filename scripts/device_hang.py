"""Does one test file hang when its interpreters fork from gpuci's server, or fresh too? N
runs, K at once, per way of starting them; a hung run gets SIGABRT (pytest's faulthandler
prints every thread's stack) and its log tail is printed.

    python scripts/device_hang.py --way fresh|forked --logs DIR FILE [-k SELECTION]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gpuci.run.forkserver as fs
from gpuci.run.discover import child_env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--way", choices=("fresh", "forked"), required=True)
    parser.add_argument("--runs", type=int, default=32)
    parser.add_argument("--at-once", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=40)
    parser.add_argument("--logs", type=Path, required=True)
    parser.add_argument("file")
    parser.add_argument("-k", dest="select", default="")
    args = parser.parse_args()
    args.logs.mkdir(parents=True, exist_ok=True)
    env = child_env(os.environ)
    server = None
    if args.way == "forked":  # the server a check starts, for this one file
        server = fs.serve(
            python=sys.executable,
            environ=env,
            rootdir=Path.cwd(),
            files=[args.file],
            paths=[args.file],
            preload=None,
        )
        assert server.usable(), server.failure
        print(args.way, "preloaded", server.ready, flush=True)
        assert server.process is not None
        tasks = Path(f"/proc/{server.process.pid}/task")
        print(args.way, "parent threads", len(list(tasks.iterdir())), flush=True)
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "gpuci.pytest_plugin",
        "-p",
        "no:cacheprovider",
        "-q",
        args.file,
        "-m",
        "not slow and not multi_gpu",
    ]
    argv += ["-k", args.select] if args.select else []
    hung: list[int] = []

    def one(n: int) -> float:
        start = time.monotonic()
        child = fs.start_interpreter(argv, env, fresh=server is None, stopping=threading.Event())
        out: list[bytes] = []
        reader = threading.Thread(target=lambda: out.append(child.stdout.read()))
        reader.start()
        try:
            child.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            hung.append(n)
            os.kill(child.pid, signal.SIGABRT)
            time.sleep(3)
            child.kill()
            child.wait()
        reader.join()
        (args.logs / f"{args.way}-{n}.log").write_bytes(b"".join(out))
        return time.monotonic() - start

    t0 = time.monotonic()
    with ThreadPoolExecutor(args.at_once) as pool:
        walls = list(pool.map(one, range(args.runs)))
    print(
        f"{args.way}: {args.runs} runs, {args.at_once} at once, {len(hung)} hung {hung};"
        f" median {sorted(walls)[len(walls) // 2]:.2f}s; all {time.monotonic() - t0:.1f}s",
        flush=True,
    )
    for n in hung[:2]:
        text = (args.logs / f"{args.way}-{n}.log").read_text(errors="replace")
        print(f"--- {args.way}-{n}.log (tail)\n" + "\n".join(text.splitlines()[-60:]))
    fs.stop_all()


if __name__ == "__main__":
    main()
