"""Discover: the test files and test ids, from pytest's own collection.

Collection runs in a child interpreter with the journal plugin, so the suite's
`pytest.ini`, `pyproject.toml` and `conftest.py` decide exactly as they would for a plain
`pytest` run, and nothing the suite imports is loaded into gpuci itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuci.model import GpuciError, UsageError
from gpuci.run.disk.side_outputs import interpreter_args
from gpuci.run.proc.plugin_env import with_plugin
from gpuci.run.proc.seed import SEED_ENV, hash_seed
from gpuci.run.proc.spawn import start_interpreter
from gpuci.run.proc.supervisor import signal_group

POISON_ENV = "GPUCI_POISON"  # read by the plugin: fill every fresh device allocation
# pytest's exit codes: a collection it ended itself (interrupted, INTERNALERROR), a usage error
PYTEST_INTERRUPTED = 2
PYTEST_INTERNAL_ERROR = 3
PYTEST_USAGE_ERROR = 4
PYTEST_NO_TESTS = 5
INTERNAL_PREFIX = "INTERNALERROR>"  # how pytest prints an internal error's traceback
_CONFTEST_ERROR = re.compile(r"ImportError while loading conftest '([^']+)'")
_FRAME = re.compile(r"(\S+:\d+): in ")  # a traceback frame: `path:line: in function`
# pytest's banner for what ended its session: `!!!!! KeyboardInterrupt !!!!!`
_BANNER = re.compile(r"^!{3,} (.+?) !{3,}$")
EXIT_BANNER = "_pytest.outcomes.Exit: "  # a hook's `pytest.exit(reason)`, in that banner
EXIT_LINE = "Exit: "  # the same, where it ended pytest before its session began


class CollectionEnded(GpuciError):
    """pytest ended the session during collection (INTERNALERROR, an interrupt, a hook's
    `pytest.exit` before collecting): plain pytest runs no test then, so gpuci runs none
    either, and it exits as plain pytest does (3, 2, the hook's code); its verdict fails,
    or warns where pytest exits 0 (nothing was checked)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class NoTestsRan(GpuciError):
    """pytest collected nothing to run (no test, or every one deselected): plain pytest
    exits 5, and so does gpuci."""

    exit_code = PYTEST_NO_TESTS


@dataclass(frozen=True, slots=True, kw_only=True)
class Discovery:
    """What pytest collected: files in collection order, their ids, and errors."""

    rootdir: Path
    files: tuple[str, ...]  # relative to rootdir, in collection order
    tests: dict[str, tuple[str, ...]] = field(default_factory=dict)  # file -> ids
    serial: frozenset[str] = frozenset()  # files holding a gpu_serial test
    errors: dict[str, str] = field(default_factory=dict)  # file -> collection error
    deselected: tuple[str, ...] = ()  # files whose every test the pytest arguments left out
    # what the suite's pytest configuration (addopts) sets --parallel-threads to, above 1:
    # the suite asks for the threads mode
    parallel_threads: int | None = None
    # the seed pytest-randomly drew in the interpreter that collected (the plain run's,
    # where the held suite interpreter collected): every other interpreter's seed
    randomly_seed: int | None = None

    @property
    def broken_dirs(self) -> frozenset[str]:
        """Directories whose conftest.py failed to import: pytest, handed one, would end
        at once, so gpuci reports discovery's error for them and runs the other files."""
        return frozenset(
            f for f in self.errors if f not in self.tests and (self.rootdir / f).is_dir()
        )

    @property
    def test_count(self) -> int:
        """How many test ids were collected."""
        return sum(len(ids) for ids in self.tests.values())


def file_of(test_id: str) -> str:
    """The file part of a pytest node id."""
    return test_id.split("::", 1)[0]


def child_env(base: Mapping[str, str]) -> dict[str, str]:
    """The environment of a child interpreter: the plugin importable, output unbuffered,
    the check's one hash seed (`gpuci.run.proc.seed`)."""
    env = dict(base)
    env[SEED_ENV] = hash_seed()
    # Append, not prepend: where gpuci is installed, this changes nothing; run from a
    # checkout, it lets the child import the plugin without shadowing the suite's modules.
    here = str(Path(__file__).resolve().parent.parent)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if here not in parts:
        parts.append(here)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def discover_tests(
    paths: Sequence[str],
    pytest_args: Sequence[str],
    *,
    python: str = sys.executable,
    timeout: float | None = None,
) -> Discovery:
    """Collect PATHS with pytest; every path must exist and yield tests or an error.

    Collection runs in a fresh interpreter of its own (`collect_fresh`).
    """
    _check_paths_exist(paths)
    with tempfile.TemporaryDirectory(prefix="gpuci-discover-") as tmp:
        journal = Path(tmp) / "collect.jsonl"
        env = with_plugin(child_env(os.environ))
        env["GPUCI_JOURNAL"] = str(journal)
        env.pop("GPUCI_ONLY", None)
        command = [
            python,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "--continue-on-collection-errors",
            # writes none of the user's files; its cache is its own, removed with it
            *interpreter_args(python, pytest_args, cache=Path(tmp) / "cache"),
            *paths,
        ]
        try:
            code, output = collect_fresh(command, env, timeout)
        except subprocess.TimeoutExpired:
            raise GpuciError(
                f"collecting {' '.join(paths)} took longer than {timeout:g}s"
                " (an import that hangs?)"
            ) from None
        except OSError as exc:
            raise GpuciError(f"could not start pytest with {python}: {exc}") from None
        events = _read_events(journal)
    text = output.decode("utf-8", "replace").strip()
    ended = _session_ended(code, events, text)
    if ended:  # before anything else: the ids it left are a random part of the suite
        raise CollectionEnded(ended, code)
    collected = [e for e in events if e.get("e") == "collected"]
    if code == PYTEST_USAGE_ERROR or not collected:
        raise (UsageError if code == PYTEST_USAGE_ERROR else GpuciError)(
            _collection_failure(paths, text, code)
        )
    return _build(paths, collected[-1], events)


def discovered(paths: Sequence[str], events: list[dict[str, object]]) -> Discovery:
    """The discovery of a suite interpreter that journaled its collection of PATHS (`held`,
    `gpuci.run.proc.held`): the same command as `discover_tests`', but for --collect-only."""
    _check_paths_exist(paths)
    # it got past its collection (`held` is journaled after the user's hooks), but a hook of
    # pytest_collection_finish may still have raised by the time the journal is read
    if any(e.get("e") == "internal-error" for e in events):
        raise CollectionEnded(
            _session_ended(PYTEST_INTERNAL_ERROR, events, ""), PYTEST_INTERNAL_ERROR
        )
    # `collected` where pytest ended the session in its collection before holding
    held = [e for e in events if e.get("e") == "held"] or [
        e for e in events if e.get("e") == "collected"
    ]
    return _build(paths, held[-1], events)


def _check_paths_exist(paths: Sequence[str]) -> None:
    for path in paths:
        if not Path(path).exists():
            raise UsageError(f"{path}: no such file or directory")


def _session_ended(code: int, events: Sequence[Mapping[str, object]], output: str) -> str:
    """Why pytest's collection ended the session red before any test ran, with what plain
    pytest exits; "" where it did not. --continue-on-collection-errors is gpuci's: a file
    that fails to import is that file's failure, not an interrupt (each screen shows it)."""
    if code == PYTEST_INTERNAL_ERROR:
        error = next((e for e in reversed(events) if e.get("e") == "internal-error"), None)
        if error is not None:
            why = f"{error.get('message', '')} (at {error.get('where', '?')})"
        else:  # the journal never heard of it: pytest's own traceback's last line
            lines = [
                line.removeprefix(INTERNAL_PREFIX).strip()
                for line in output.splitlines()
                if line.startswith(INTERNAL_PREFIX)
            ]
            why = next((line for line in reversed(lines) if line), "see its output")
        return (
            "pytest's collection ended with INTERNALERROR"
            f" (plain pytest: exit 3, no test run): {why}"
        )
    banners = [m[1] for m in map(_BANNER.match, output.splitlines()) if m]
    if code == PYTEST_INTERRUPTED:
        why = banners[-1] if banners else "see `pytest --collect-only`"
        return f"pytest's collection was interrupted (plain pytest: exit 2, no test run): {why}"
    exits = [b.removeprefix(EXIT_BANNER) for b in banners if b.startswith(EXIT_BANNER)]
    # before its session began (pytest_configure), pytest says only `Exit: reason`
    lines = output.splitlines()
    exits += [line.removeprefix(EXIT_LINE) for line in lines if line.startswith(EXIT_LINE)]
    if exits and not any(e.get("e") == "collected" for e in events):
        # a hook ended the session before its collection (`pytest.exit` in a conftest's
        # pytest_sessionstart or pytest_configure: a GPU suite on a runner without a GPU),
        # with its own code
        return (
            f"pytest ended the session before collecting (plain pytest: exit {code},"
            f" no test run): pytest.exit: {exits[-1]}"
        )
    return ""


def _collection_failure(paths: Sequence[str], output: str, code: int) -> str:
    """Why pytest collected nothing: a conftest.py that failed to import names its file and
    line; otherwise the last lines pytest printed."""
    lines = output.splitlines()
    conftest = _CONFTEST_ERROR.search(output)
    if conftest:
        where = [m[1] for m in map(_FRAME.match, lines) if m and not m[1].startswith("<")]
        error = [line.removeprefix("E").strip() for line in lines if line.startswith("E ")]
        place = where[-1] if where else conftest[1]
        why = error[-1] if error else f"see `pytest --collect-only {' '.join(paths)}`"
        return f"{place}: conftest.py failed to import: {why}"
    tail = " | ".join(lines[-3:]) or f"exit code {code} before collecting anything"
    return f"pytest could not collect {' '.join(paths)}: {tail}"


def _read_events(journal: Path) -> list[dict[str, object]]:
    """The journal's events; a missing journal means pytest never got going."""
    try:
        lines = journal.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def _build(
    paths: Sequence[str], collected: dict[str, object], events: list[dict[str, object]]
) -> Discovery:
    """Group the collected ids by file, keeping collection order."""
    rootdir = Path(str(collected["rootdir"]))
    tests: dict[str, list[str]] = {}
    ids = collected["ids"]
    assert isinstance(ids, list)
    for test_id in ids:
        tests.setdefault(file_of(test_id), []).append(test_id)
    errors = {
        str(e["id"]): str(e.get("message", "")) for e in events if e.get("e") == "collect-error"
    }
    order = list(tests)
    order += [f for f in errors if f not in tests]
    serial_ids = collected.get("serial", [])
    assert isinstance(serial_ids, list)
    deselected = collected.get("deselected", [])
    assert isinstance(deselected, list)
    asked = collected.get("parallel_threads")
    seed = collected.get("randomly_seed")
    discovery = Discovery(
        randomly_seed=seed if isinstance(seed, int) else None,
        parallel_threads=asked if isinstance(asked, int) and asked > 1 else None,
        rootdir=rootdir,
        files=tuple(order),
        tests={f: tuple(v) for f, v in tests.items()},
        serial=frozenset(file_of(i) for i in serial_ids),
        errors=errors,
        deselected=tuple(str(f) for f in deselected if f not in tests and f not in errors),
    )
    if not discovery.files and not discovery.deselected:
        raise NoTestsRan(
            f"{' '.join(paths)}: no tests collected: plain pytest exits 5, no tests ran"
            " (does it hold files that pytest's python_files setting matches? or was every"
            " file skipped at import?)"
        )
    if not collected.get("last_failed"):  # --lf leaves out files without a failure
        _check_every_path_has_tests(paths, discovery)
    if not discovery.files:  # a path that yields only deselected tests passed the check above
        count = collected.get("deselected_tests")
        what = f"{count} test(s)" if isinstance(count, int) and count else "tests"
        raise NoTestsRan(
            f"{' '.join(paths)}: pytest collected {what} and deselected every one (-k, -m,"
            " --deselect or a conftest.py hook): plain pytest exits 5, no tests ran;"
            " nothing to check"
        )
    return discovery


def _check_every_path_has_tests(paths: Sequence[str], discovery: Discovery) -> None:
    """A path that yields neither a test nor an error is a mistake worth stopping for."""
    found = [(discovery.rootdir / f).resolve() for f in (*discovery.files, *discovery.deselected)]
    for path in paths:
        target = Path(path).resolve()
        if not any(f == target or target in f.parents for f in found):
            hint = (
                "does it hold files that pytest's python_files setting matches?"
                if target.is_dir()
                else "is it a test file that pytest's python_files / python_functions"
                " settings match?"
            )
            # pytest.importorskip or a module-level skip: plain pytest collects nothing too
            skipped = "; or was every file skipped at import (run plain pytest: exit 5)?"
            raise UsageError(f"{path}: no tests collected ({hint}{skipped})")


def pytest_target(rootdir: Path, file: str) -> str:
    """A path pytest finds from our working directory (ids are rootdir-relative); never one
    that starts with `-`, which pytest would read as an option."""
    path = rootdir / file
    with contextlib.suppress(ValueError):
        relative = str(path.relative_to(Path.cwd()))
        return f"./{relative}" if relative.startswith("-") else relative
    return str(path)


def can_import(python: str, module: str) -> bool:
    """Whether `python` (the interpreter that runs the suite, not gpuci's own) finds `module`."""
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    try:
        proc = subprocess.run(
            [python, "-c", probe],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=child_env(os.environ),
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def collect_fresh(
    command: Sequence[str], env: Mapping[str, str], timeout: float | None
) -> tuple[int, bytes]:
    """Run the collecting interpreter, fresh, to its end; its exit code and output."""
    child = start_interpreter(command, env)
    try:
        output, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        signal_group(child, signal.SIGKILL)
        child.communicate()
        raise
    return child.returncode, output
