"""Beside discovery: the interpreters a check starts before it knows its tests.

Plain pytest imports and collects once; a check collects first (discovery, which is the
suite interpreter's own collection) and only then plans its screens. Every interpreter
started after that pays its start-up on top (CuPy: 3-5 s, PyTorch's testing utilities:
10-20 s), so a check starts them at once, fresh, held after their collection until a
screen takes them (`gpuci.run.proc.held`):
- the suite interpreter, on the check's PATHS, exactly as plain pytest would start;
- each latent order's whole suite (`reversed`, `shuffled:SEED`, in the slots after the
  suite's), on the files pytest will collect in that order: the guess of what discovery
  will find (below), as its screen would hand them over;
- the parallel screen's first files, one per file slot: the files an earlier run timed
  longest (`--durations`, or the results in OUT), else the heaviest by their source: their
  tests, each that compiles a kernel weighing as many (`gpuci.run.sched.source_tests`,
  `gpuci.run.sched.compiles`; ties in the order pytest will
  collect them: PATHS that are files, then the test files under PATHS that are
  directories), each where its earlier peak in device memory fits its slot's first GPU
  beside the others (`admit_first`, the memory gate's rule). A guess that is not what the
  screen starts (another file first, another rootdir, another slot's GPUs) is killed
  unused: a guess costs idle cores, never a result.
The lazy isolated pass's first files are started the same way while the screens go on
(`hold_isolated_file`, from `gpuci.lazy_isolated`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from gpuci.formats import read_mode_run
from gpuci.model import SUITE_UNIT, WHOLE_SUITE_UNITS, GpuciError, Mode
from gpuci.run.disk.outdir import STATE_DIR
from gpuci.run.disk.side_outputs import selects_by_cache
from gpuci.run.proc.discover import pytest_target
from gpuci.run.proc.gpumem import MemoryGate, with_margin
from gpuci.run.proc.gpus import ask_machine_ahead, detect_gpus
from gpuci.run.proc.held import held_folder, hold_file, hold_suite, let_go
from gpuci.run.proc.launch import (
    SUITE_STEM,
    Launch,
    junit_part,
    launch_environ,
    pytest_command,
    unit_stem,
)
from gpuci.run.sched.modes import AskedModes, files_in_order, latent_orders, with_seed
from gpuci.run.sched.options import ModeOptions
from gpuci.run.sched.plan import parse_gpus_per_slot, parse_workers, read_durations
from gpuci.run.sched.plan_mode import history_of, mode_dir_of, pool_workers, run_options, shard_of
from gpuci.run.sched.session import RunOptions
from gpuci.run.sched.source_tests import weigh_sources
from gpuci.run.sched.unit import SCREEN_NICE, mode_environ, mode_pytest_args
from gpuci.run.sched.views import plain_gpus, screen_gpus, window_env

# where pytest's rootdir is decided (the first of these up from the paths), and the
# folders it does not look in for tests (its default norecursedirs)
INI_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
SKIPPED_DIRS = ("*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}")
TEST_FILES = ("test_*.py", "*_test.py")  # pytest's default python_files


@contextlib.contextmanager
def held_beside_discovery(
    options: ModeOptions, *, suite: bool, files: bool, orders: Sequence[Mode] = ()
) -> Iterator[None]:
    """Where unsharded, start the suite interpreter (`suite`), each latent order's whole
    suite (`orders`, in the order of their slots) and the parallel screen's first files
    (`files`) now, beside discovery; those no screen took are killed at the end."""
    try:  # a Ctrl-C while they start ends those started
        if shard_of(options) is None:
            if suite:
                _hold_suite(options)
            for slot, mode in enumerate(orders, start=1 if suite else 0):
                _hold_whole_order(options, mode, slot=slot, suite=suite, orders=len(orders))
            if files:
                _hold_first_files(options, orders=len(orders))
        ask_machine_ahead()  # what each run.json records of the machine, asked meanwhile
        yield
    finally:
        let_go()


@contextlib.contextmanager
def held_for_the_check(
    options: ModeOptions, asked: AskedModes, *, serial: bool, resume: bool
) -> Iterator[AskedModes]:
    """`held_beside_discovery` for a check (not where it resumes): the suite interpreter,
    and, where the modes run as screens, the latent orders' and the parallel screen's
    first files, where each was asked for (or is a default); `asked`, with a shuffle's seed
    drawn now where it named none, so that its order is known."""

    def asked_for(mode: Mode) -> bool:
        return not resume and (asked.modes is None or mode in asked.modes)

    asked = with_seed(asked) if asked_for(Mode.SHUFFLED) else asked
    gpus = len(detect_gpus(options.gpus, os.environ))
    orders = [m for m in latent_orders(asked, gpus) if not serial and asked_for(m)]
    files = asked_for(Mode.PARALLEL) and asked_for(Mode.SUITE) and not serial
    seeded = dataclasses.replace(options, shuffle_seed=asked.seed)
    with held_beside_discovery(seeded, suite=asked_for(Mode.SUITE), files=files, orders=orders):
        yield asked


def planned_run(options: ModeOptions, mode: Mode) -> RunOptions:
    """`mode`'s run as the check will plan it (its GPUs, their width per slot, its folder)."""
    gpus = detect_gpus(options.gpus, os.environ)
    per_slot = parse_gpus_per_slot(options.gpus_per_slot, gpus)
    out = mode_dir_of(options, mode)
    return run_options(
        options, mode, out=out, shard=None, gpus=gpus, per_slot=per_slot, resume=None
    )


def _hold_suite(options: ModeOptions) -> None:
    """The check's suite interpreter, on PATHS, as the suite screen will start it."""
    run = planned_run(options, Mode.SUITE)
    launch = Launch(
        key=SUITE_UNIT,
        ids=(),
        targets=options.paths,  # what discovery collects, and plain pytest would
        slot=0,  # the suite's in the screens, and every serial interpreter's
        gpu=plain_gpus(run.gpus),
        attempt=1,
        junit=junit_part(run.out, SUITE_STEM, 1),
        label="",
    )
    folder = options.out / STATE_DIR / "held-suite"
    hold_suite(run.python, mode_pytest_args(run), mode_environ(run), launch, folder)


def _hold_whole_order(
    options: ModeOptions, mode: Mode, *, slot: int, suite: bool, orders: int
) -> None:
    """`mode`'s whole suite (a latent order) in `slot`, on the files pytest will likely
    collect, in `mode`'s order, as its screen will start it (`UnitRunner._first_launch`):
    taken where discovery finds those files, killed unused where it does not."""
    if not options.paths or selects_by_cache(options.pytest_args):  # --lf: ids, not files
        return
    run = planned_run(options, mode)
    rootdir = _likely_rootdir(options)
    guessed = [f for f in (_relative(p, rootdir) for p in _collection_order(options.paths)) if f]
    if not guessed:
        return
    in_order = files_in_order(mode, guessed, options.shuffle_seed)
    views = screen_gpus(run.gpus, slot + 1, run.gpus_per_slot, suite=suite, orders=orders)
    folder = held_folder(options.out / STATE_DIR / f"held-{mode.value}")
    targets = tuple(pytest_target(rootdir, f) for f in in_order)
    _hold_unit(run, WHOLE_SUITE_UNITS[mode], targets, slot=slot, view=views[slot], folder=folder)


def _hold_first_files(options: ModeOptions, *, orders: int = 0) -> None:
    """One interpreter per file slot of the parallel screen, for the files it starts first
    (its slots after the suite's and the `orders` latent orders')."""
    if not options.paths or selects_by_cache(options.pytest_args):  # --lf: ids, not files
        return
    run = planned_run(options, Mode.PARALLEL)
    gpus, per_slot = run.gpus, run.gpus_per_slot
    rootdir, first = _first_files(options)
    if not first:
        return
    # the screens' slots as `gpuci.check` will count them: the suite's, the latent orders'
    # and the files'
    slots, _ = pool_workers(parse_workers(options.workers), gpus, per_slot, len(first) + 1)
    views = screen_gpus(gpus, slots + 1 + orders, per_slot, suite=True, orders=orders)
    folder = held_folder(options.out / STATE_DIR / "held-files")
    gate = MemoryGate(run.peaks)  # asks the GPUs' free memory only where peaks are known
    chosen = admit_first(first, views, slots, run.peaks, gate.free_mib, first_slot=1 + orders)
    for slot, file in chosen:
        target = (pytest_target(rootdir, file),)
        _hold_unit(run, file, target, slot=slot, view=views[slot], folder=folder, name=str(slot))


def hold_isolated_file(options: ModeOptions, rootdir: Path, file: str) -> None:
    """`file`'s interpreter as the lazy isolated pass will start it (every GPU, as plain
    pytest sees them), started now and held until the pass takes it (`gpuci.lazy_isolated`);
    killed with the others where it does not."""
    run = planned_run(options, Mode.ISOLATED)
    name = "".join(c if c.isalnum() else "-" for c in file)
    folder = held_folder(options.out / STATE_DIR / f"held-isolated-{name}")
    view = plain_gpus(run.gpus)
    target = (pytest_target(rootdir, file),)
    _hold_unit(run, file, target, slot=0, view=view, folder=folder, name="0", ahead=True)


def _hold_unit(
    run: RunOptions,
    key: str,
    targets: tuple[str, ...],
    *,
    slot: int,
    view: str | None,
    folder: Path,
    name: str = "0",
    ahead: bool = False,
) -> None:
    """The first interpreter of `run`'s mode for the unit `key` (a file, or a latent
    order's whole suite on `targets`) in `slot` seeing `view`, as that mode will start it
    (`gpuci.run.sched.unit.UnitRunner`), started now at a screen's niceness, held (its
    journal and file of ids in `folder`, by `name`: its ids are handed over when its screen
    takes it); `ahead`: for a later pass."""
    environ = mode_environ(run)
    launch = Launch(
        key=key,
        ids=None,
        targets=targets,
        slot=slot,
        gpu=view,
        env=window_env(view, run.gpus, environ),
        attempt=1,
        junit=junit_part(run.out, unit_stem(key), 1),
        label="interpreter 1",
    )
    command = pytest_command(run.python, mode_pytest_args(run), launch, out=run.out)
    journal, only = folder / f"{name}.jsonl", folder / f"{name}.json"
    env = launch_environ(environ, launch, journal=journal, only=only)
    hold_file(command, launch.targets, env, nice=SCREEN_NICE, ahead=ahead)


def _first_files(options: ModeOptions) -> tuple[Path, list[str]]:
    """The rootdir, and the files (relative to it) the parallel screen starts first: by an
    earlier run's times, longest first, else by their tests counted in their source."""
    history = history_of(options) / Mode.PARALLEL.value
    durations: dict[str, float] = {}
    with contextlib.suppress(GpuciError):  # unreadable: the check says so when it plans
        durations = read_durations(options.durations or history, Mode.PARALLEL)
    rootdir = _likely_rootdir(options)
    if durations:
        # an earlier run's file that is gone now has nothing to start (its interpreter would
        # end at once, a usage error)
        files = sorted(
            (f for f in durations if (rootdir / f).exists()), key=lambda f: -durations[f]
        )
    else:
        # a first check: the heaviest first (tests, a kernel compile counted as many), as
        # the plan will order them once pytest has collected them (the source's count of
        # the tests stands in until then)
        weights = weigh_sources(_collection_order(options.paths))
        by_weight = sorted(weights, key=lambda p: -weights[p].weight)  # stable: collection order
        files = [_relative(p, rootdir) for p in by_weight]
    return rootdir, [f for f in files if f]


def admit_first(
    files: Sequence[str],
    views: Sequence[str | None],
    slots: int,
    peaks: Mapping[str, int],
    free_mib: Callable[[str], int | None] | None,
    *,
    first_slot: int = 1,
) -> list[tuple[int, str]]:
    """(slot, file) for each of `slots` file slots from `first_slot` on, in order: the next
    of `files` whose peak in device memory (an earlier run's, with the memory gate's margin)
    fits what its slot's first GPU has free (`free_mib`, asked once a GPU) beside the ones
    chosen before; a file of unknown peak fits, as at the memory gate."""
    free: dict[str, int | None] = {}
    chosen: list[tuple[int, str]] = []
    remaining = list(files)
    for slot in range(first_slot, first_slot + slots):
        device = (views[slot] or "0").split(",")[0].strip()
        if device not in free:
            free[device] = free_mib(device) if free_mib is not None else None
        for file in remaining:
            need = peaks.get(file)
            left = free[device]
            if need is None or left is None or with_margin(need) <= left:
                if need is not None and left is not None:
                    free[device] = left - int(with_margin(need))
                chosen.append((slot, file))
                remaining.remove(file)
                break
    return chosen


def _likely_rootdir(options: ModeOptions) -> Path:
    """pytest's rootdir: an earlier run's in OUT (or in what --durations names), else as
    pytest will likely decide it from the paths."""
    earlier = _earlier_rootdir(history_of(options) / Mode.PARALLEL.value)
    return earlier or _rootdir_of(options.paths)


def _earlier_rootdir(history: Path) -> Path | None:
    with contextlib.suppress(GpuciError, OSError):
        return Path(read_mode_run(history / "run.json").rootdir)
    return None


def _rootdir_of(paths: tuple[str, ...]) -> Path:
    """pytest's rootdir as it will likely decide it: the first folder up from the paths'
    common ancestor holding an ini file, else that ancestor."""
    absolute = [Path(p).resolve() for p in paths]
    ancestor = Path(os.path.commonpath([p if p.is_dir() else p.parent for p in absolute]))
    for folder in (ancestor, *ancestor.parents):
        if any((folder / name).is_file() for name in INI_FILES):
            return folder
    return ancestor


def _collection_order(paths: tuple[str, ...]) -> Iterator[Path]:
    """The test files under `paths` in the order pytest collects them: each path as given,
    a folder's entries by name (files and folders alike), its default patterns."""
    for given in paths:
        path = Path(given.split("::", 1)[0]).resolve()
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from _walk(path)


def _walk(folder: Path) -> Iterator[Path]:
    with contextlib.suppress(OSError):
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.is_dir():
                if not any(fnmatch.fnmatch(entry.name, p) for p in SKIPPED_DIRS):
                    yield from _walk(entry)
            elif any(fnmatch.fnmatch(entry.name, p) for p in TEST_FILES):
                yield entry


def _relative(path: Path, rootdir: Path) -> str:
    """`path` as pytest names it in ids: relative to the rootdir ('' where outside it)."""
    try:
        return path.relative_to(rootdir).as_posix()
    except ValueError:
        return ""
