"""Reproduce: the shell commands that show a finding again, and its other half.

Built by the diff (a command for every finding) from the orders (`gpuci.evidence.orders`)
and the evidence; shown by the report. Commands are ready to paste into bash, one line each
(`gpuci.shell`: an id with a newline is `$'...'`-quoted), run from the suite's rootdir.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuci import shell
from gpuci.evidence.orders import Order, ran_before, ran_beside
from gpuci.evidence.results import ModeResults
from gpuci.model import (
    LATENT_ORDERS,
    NOT_PASSING,
    WHOLE_SUITE_MODES,
    Category,
    Mode,
    ModeRun,
    Outcome,
    TestEvidence,
    unit_of,
    whole_suite_unit,
)
from gpuci.run.disk.side_outputs import command_args, seed_args
from gpuci.run.proc.discover import POISON_ENV
from gpuci.run.proc.plugin_env import PLUGIN
from gpuci.run.proc.seed import SEED_ENV
from gpuci.run.sched.plan import thread_args
from gpuci.run.sched.views import plain_gpus

PYTEST = ("-m", "pytest")  # after the interpreter (`python`, or named)
ORDERED = Category.ORDER_DEPENDENT
REORDERING = ("pytest-randomly", "pytest-random-order")  # run.json environment keys


def _selectable(test_id: str) -> str:
    """What pytest is given to run the test: its id, or its file for a pseudo test."""
    file, _, name = test_id.partition("::")
    # No real test's name starts with "[": such an id is the runner's stand-in for an
    # interpreter that died between tests, and only its file can be run.
    if name.startswith("["):
        return "" if whole_suite_unit(file) else file
    return test_id


def reproduce_command(
    test_id: str,
    category: Category,
    *,
    outcomes: Mapping[Mode, Outcome],
    reruns: Sequence[Outcome],
    results: Mapping[Mode, ModeResults],
    orders: Mapping[Mode, Order],
    alone_in_threads: Outcome | None = None,
    gpu: str | None = None,
) -> str:
    """A shell command that shows the finding: the failing order, the files beside it, the
    test in several threads (thread-unsafe: alone, unless the evidence saw it pass alone in
    threads; then its file's order up to it), or the test alone.

    Each carries the GPUs the interpreter it replays had (`CUDA_VISIBLE_DEVICES=...`): a
    screen's, or where it runs as the evidence ran it, `gpu` (its strict runs' view, where
    not the serial one).
    """
    if category in (Category.PASSED, Category.SKIPPED):
        return ""
    target = _selectable(test_id)
    if not target:
        return ""
    file = target.partition("::")[0]
    if category is Category.CONCURRENCY and Mode.PARALLEL in results:
        beside = ran_beside(results[Mode.PARALLEL], file)
        if beside:
            return _run_together(results[Mode.PARALLEL], [target, *beside])
    if category is Category.THREAD_UNSAFE and Mode.THREADS in results:
        run = results[Mode.THREADS].run  # in as many threads as the threads mode ran it
        earlier: list[str] = []
        if alone_in_threads is Outcome.PASSED:
            earlier, _ = ran_before(orders[Mode.THREADS], test_id, by_file=False)
        extra = thread_args(run.threads)
        return pytest_command(run, [*earlier, target], gpu or serial_gpu(run), extra=extra)
    mode = Mode.ISOLATED if Mode.ISOLATED in results else next(iter(results))
    before: list[str] = []
    omitted = 0
    wanted = _shown_only_in_order(category, outcomes, reruns)
    # the plain run's orders first, then a latent order's (the files in the order it ran)
    for failing in (Mode.ISOLATED, Mode.SUITE, *LATENT_ORDERS):
        if wanted is not None and outcomes.get(failing) is wanted and failing in orders:
            whole = failing in WHOLE_SUITE_MODES
            before, omitted = ran_before(orders[failing], test_id, by_file=whole)
            if before:
                mode = failing
                break
    run = results[mode].run
    # alone, a test sees what every serial interpreter of the check sees
    if before:
        gpu = gpu_of(results[mode], unit_of(mode) or file)
    command = pytest_command(run, [*before, target], gpu or serial_gpu(run))
    if omitted:
        command += f"  # {omitted} earlier in the {mode.value} order left out, see its run.json"
    return command


def culprit_command(
    test_id: str,
    category: Category,
    culprits: Sequence[str],
    results: Mapping[Mode, ModeResults],
    group: Sequence[str] = (),
    *,
    gpu: str | None = None,
    pair_gpu: str | None = None,
) -> str:
    """The minimal command: the culprits, then the victim (then its `group`, the victims
    answered together, where it has one); or the victim started together with the files
    beside which it failed, every side with `pair_gpu` where its pair runs shared that view
    (else each with its parallel one). "" where culprits do not make the finding show.
    """
    target = _selectable(test_id)
    if not culprits or not target:
        return ""
    if category is Category.CONCURRENCY and Mode.PARALLEL in results:
        parallel = results[Mode.PARALLEL]
        if all("::" in c for c in culprits):
            # a pair's partner: its victim alone, beside its file (the victim's command)
            sides = [*culprits, target.partition("::")[0]]
            return _run_together(parallel, sides, gpu=pair_gpu)
        return _run_together(parallel, [target, *culprits], gpu=pair_gpu)
    if category is Category.ORDER_DEPENDENT:
        run = next(iter(results.values())).run
        return pytest_command(run, [*culprits, *(group or [target])], gpu or serial_gpu(run))
    return ""


def provider_command(
    test_id: str,
    category: Category,
    culprits: Sequence[str],
    results: Mapping[Mode, ModeResults],
    group: Sequence[str] = (),
    *,
    gpu: str | None = None,
) -> str:
    """A depends-on-others finding's other half: its providers, then it (it passes), where
    its reproduce command runs it alone (it fails); then its `group`, where it has one."""
    target = _selectable(test_id)
    if category is not Category.DEPENDS_ON_OTHERS or not culprits or not target:
        return ""
    run = next(iter(results.values())).run
    # a provider file is collected (imported) with every one of its tests deselected
    # one word each: a file named `-x.py` would be read as an option after a lone --deselect
    deselect = [f"--deselect={c}::" for c in culprits if "::" not in c]
    targets = [*culprits, *(group or [target])]
    return pytest_command(run, targets, gpu or serial_gpu(run), extra=deselect)


def alone_command(
    test_id: str,
    category: Category,
    culprits: Sequence[str],
    results: Mapping[Mode, ModeResults],
    group: Sequence[str] = (),
    *,
    gpu: str | None = None,
) -> str:
    """An order-dependent finding's other half: the test alone (it passes), where its
    reproduce command runs it after its culprits (it fails); its `group` without them,
    where it has one."""
    target = _selectable(test_id)
    if category is not Category.ORDER_DEPENDENT or not culprits or not target:
        return ""
    run = next(iter(results.values())).run
    return pytest_command(run, group or [target], gpu or serial_gpu(run))


def group_command(
    category: Category,
    group: Sequence[str],
    results: Mapping[Mode, ModeResults],
    gpu: str | None = None,
) -> str:
    """A group-answered depends-on-others finding's command that fails: its group, without
    its providers ("" for any other)."""
    if category is not Category.DEPENDS_ON_OTHERS or not group:
        return ""
    run = next(iter(results.values())).run
    return pytest_command(run, group, gpu or serial_gpu(run))


@dataclass(frozen=True, slots=True, kw_only=True)
class Commands:
    """What a finding prints: the command that shows it, and its other half."""

    reproduce: str
    with_provider: str = ""  # depends-on-others: the command that passes
    passes_alone: str = ""  # order-dependent: the command that passes


def finding_commands(
    test_id: str,
    category: Category,
    *,
    searched: Category,
    evidence: TestEvidence | None,
    outcomes: Mapping[Mode, Outcome],
    reruns: Sequence[Outcome],
    results: Mapping[Mode, ModeResults],
    orders: Mapping[Mode, Order],
) -> Commands:
    """A finding's commands: its poisoned run alone where that fails (its own bug); else
    its culprits' (its group's, where group runs answered it together with the other
    victims of its culprits: the runs as they ran); else the order or the test alone.
    `searched`: the category its search was made for (before the strict runs')."""
    culprits = evidence.culprits if evidence is not None else ()
    group = evidence.group if evidence is not None and test_id in evidence.group else ()
    diagnosed = evidence is not None and evidence.poisoned in NOT_PASSING
    gpu = evidence.gpu if evidence is not None else None  # its strict runs' view
    reproduce = (
        (poisoned_command(test_id, results, gpu) if diagnosed and category is ORDERED else "")
        or culprit_command(
            test_id,
            category,
            culprits,
            results,
            group,
            gpu=gpu,
            pair_gpu=evidence.pair_gpu if evidence is not None else None,
        )
        or group_command(category, group, results, gpu)
        or reproduce_command(
            test_id,
            category,
            outcomes=outcomes,
            reruns=reruns,
            results=results,
            orders=orders,
            alone_in_threads=evidence.threaded if evidence is not None else None,
            gpu=gpu,
        )
    )
    return Commands(
        reproduce=reproduce,
        with_provider=provider_command(test_id, searched, culprits, results, group, gpu=gpu),
        passes_alone=alone_command(test_id, category, culprits, results, group, gpu=gpu),
    )


def poisoned_command(
    test_id: str, results: Mapping[Mode, ModeResults], gpu: str | None = None
) -> str:
    """The test alone with every fresh device allocation poisoned, as the evidence ran it:
    the command that shows a read of uninitialized memory as the test's own failure."""
    target = _selectable(test_id)
    if not target:
        return ""
    run = next(iter(results.values())).run
    return in_rootdir(run, _pytest(run, [target], gpu or serial_gpu(run), poison=True))


def serial_gpu(run: ModeRun) -> str | None:
    """The CUDA_VISIBLE_DEVICES of a check's serial interpreters: the plain run's view."""
    return plain_gpus(run.gpus)


def gpu_of(results: ModeResults, unit: str) -> str | None:
    """The CUDA_VISIBLE_DEVICES a unit (a file, or the suite) ran with in this mode."""
    for part in results.parts:
        for file_run in part.files:
            if file_run.file == unit:
                return file_run.gpu
    return serial_gpu(results.run)


def pytest_command(
    run: ModeRun, targets: Sequence[str], gpu: str | None, *, extra: Sequence[str] = ()
) -> str:
    """`cd ROOT && CUDA_VISIBLE_DEVICES=G python -m pytest ARGS EXTRA TARGETS`, for a shell."""
    return in_rootdir(run, _pytest(run, targets, gpu, extra))


def in_rootdir(run: ModeRun, command: str) -> str:
    """`command`, run where pytest's rootdir is, from the directory gpuci ran in (the
    project's root in a CI job): as it is where they are one, `cd sub && ` where the
    rootdir lies below, `cd /abs && ` elsewhere (or where the run did not record it)."""
    if not run.rootdir:
        return command
    where = run.rootdir
    if run.workdir:
        relative = os.path.relpath(run.rootdir, run.workdir)
        if relative == os.curdir:
            return command
        if not relative.startswith(os.pardir):
            where = relative
    return f"{shell.join(['cd', where])} && {command}"


def whole_files(run: ModeRun, targets: Sequence[str]) -> list[str]:
    """`targets`, with each file's test ids named by the file where naming it runs the same
    tests: two or more ids that are every test the run had of that file, in the order it
    ran them, and the file named nowhere else in `targets` (pytest would run it twice).
    The user's arguments, in every command, select in the file what they selected here.
    Where a plugin that reorders tests was installed, the ids stay: they alone name the
    order the tests ran in."""
    if any(plugin in run.environment for plugin in REORDERING):
        return list(targets)
    ran: dict[str, list[str]] = {}
    for test in run.tests:
        ran.setdefault(test.id.partition("::")[0], []).append(test.id)
    files = [target.partition("::")[0] for target in targets]
    shortest: list[str] = []
    start = 0
    while start < len(targets):
        file = files[start]
        end = start
        while end < len(targets) and files[end] == file and "::" in targets[end]:
            end += 1
        whole = end - start >= 2 and files.count(file) == end - start
        if whole and list(targets[start:end]) == ran.get(file):
            shortest.append(file)
            start = end
        else:
            shortest.append(targets[start])
            start += 1
    return shortest


def _pytest(
    run: ModeRun,
    targets: Sequence[str],
    gpu: str | None,
    extra: Sequence[str] = (),
    *,
    poison: bool = False,
) -> str:
    targets = whole_files(run, targets)
    env = f"CUDA_VISIBLE_DEVICES={shell.quote(gpu)} " if gpu is not None else ""
    seed = run.environment.get("hash_seed")
    if seed:  # every interpreter of the check hashed with it (`gpuci.run.proc.seed`)
        env += f"{SEED_ENV}={shell.quote(seed)} "
    if poison or run.poison:  # gpuci's plugin does the filling
        env += f"{POISON_ENV}=1 "
        extra = ["-p", PLUGIN, *extra]
    python = run.environment.get("interpreter", "python")  # named where PATH has another
    # pytest reads a word that starts with `-` as an option, `--` not excepted: `./-x.py`
    paths = [f"./{t}" if t.startswith("-") else t for t in targets]
    # the user's arguments, and the plain run's seed where pytest-randomly drew one
    args = [*command_args(run.pytest_args), *seed_args(run.randomly_seed)]
    return env + shell.join([python, *PYTEST, *args, *extra, *paths])


def _run_together(results: ModeResults, targets: Sequence[str], *, gpu: str | None = None) -> str:
    """A command that runs each target in its own interpreter, all at once, as gpuci did:
    each with `gpu` where given (its pair runs' shared view), else its file's view in
    `results`."""
    run = results.run
    each = " & ".join(
        _pytest(run, [t], gpu if gpu is not None else gpu_of(results, t.partition("::")[0]))
        for t in targets
    )
    return in_rootdir(run, f"({each} & wait)")


def _shown_only_in_order(
    category: Category, outcomes: Mapping[Mode, Outcome], reruns: Sequence[Outcome]
) -> Outcome | None:
    """The outcome that only the failing order shows, when running it alone would not."""
    if category is Category.ORDER_DEPENDENT:
        return Outcome.FAILED
    if category in (Category.CRASHED, Category.TIMED_OUT):
        # A crash that alone-reruns and isolated mode did not repeat happened after
        # other tests: the test alone would just pass.
        outcome = Outcome(category.value)
        if outcome not in reruns and outcomes.get(Mode.ISOLATED) is not outcome:
            return outcome
    return None
