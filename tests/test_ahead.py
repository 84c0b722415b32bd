"""Interpreters started ahead: each is held after its collection until it is taken, and
runs its own file's tests then, in whichever slot takes it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from cli_runner import fresh_interpreters, write_files

from gpuci.run.proc.launch import Launch

TEST = "import time\n\ndef test_{name}():\n    time.sleep(0.1)\n"


def launch(name: str, slot: int) -> Launch:
    return Launch(
        key=f"test_{name}.py",
        ids=None,
        targets=(f"test_{name}.py",),
        slot=slot,
        gpu=None,
        attempt=1,
        junit=None,
        label="interpreter 1",
    )


def events(out: Path, name: str) -> list[str]:
    path = out / "journal" / f"test_{name}.py.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["e"] for line in path.read_text().splitlines()]


def wait_until_held(out: Path, names: str) -> None:
    deadline = time.monotonic() + 120
    while not all("held" in events(out, n) for n in names):
        assert time.monotonic() < deadline, {n: events(out, n) for n in names}
        time.sleep(0.05)


@pytest.mark.slow
def test_two_interpreters_started_ahead_wait_each_to_be_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_files(tmp_path, {f"test_{n}.py": TEST.format(name=n) for n in "abc"})
    monkeypatch.chdir(root)  # the targets are relative, as the screens hand them
    out = root / "out"
    interpreters = fresh_interpreters(out)
    try:
        interpreters.start_ahead(launch("b", slot=1))
        interpreters.start_ahead(launch("c", slot=1))
        wait_until_held(out, "bc")
        # taken by another slot (the same GPUs): b runs, c still waits for its own turn
        attempt = interpreters.run(launch("b", slot=2))
        assert [r.outcome.value for r in attempt.results] == ["passed"]
        assert attempt.interpreter.startup_s == 0.0  # collected before it was taken
        assert attempt.interpreter.ahead
        assert attempt.interpreter.to_json()["ahead"] is True
        time.sleep(0.5)
        assert "start" not in events(out, "c"), events(out, "c")
        attempt = interpreters.run(launch("c", slot=1))
        assert [r.outcome.value for r in attempt.results] == ["passed"]
    finally:
        interpreters.close()
