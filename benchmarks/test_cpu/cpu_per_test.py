"""A pytest plugin (`-p cpu_per_test`, this folder on PYTHONPATH) for gpuci's own tests: per
test, its CPU seconds (its own and its waited-for children's, as tests/conftest.py's
QuickLaneGuard counts) and the Pythons it started (sitecustomize.py's lines), one JSON line
per test in CPU_PER_TEST_DIR. See test-suite-cpu.md."""

from __future__ import annotations

import hashlib
import json
import os
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

OUT = Path(os.environ["CPU_PER_TEST_DIR"])


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    name = hashlib.md5(item.nodeid.encode()).hexdigest()  # noqa: S324 (a file name)
    starts = OUT / "starts" / f"{name}.jsonl"
    starts.parent.mkdir(parents=True, exist_ok=True)
    os.environ["CPU_PER_TEST_STARTS"] = str(starts)
    own, children = _cpu()
    yield
    own_after, children_after = _cpu()
    del os.environ["CPU_PER_TEST_STARTS"]
    lines = starts.read_text().splitlines() if starts.exists() else []
    pythons = sum(1 for text in lines if "start" not in json.loads(text))  # those that exited
    line = {
        "id": item.nodeid,
        "own": round(own_after - own, 2),
        "children": round(children_after - children, 2),
        "pythons": pythons,
        "starts": name,
    }
    with (OUT / f"tests-{os.getpid()}.jsonl").open("a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")
