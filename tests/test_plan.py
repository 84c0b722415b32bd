"""Planning: LPT order, balanced shards, GPU slots, workers."""

from __future__ import annotations

import pytest

from gpuci.model import Mode, UsageError
from gpuci.run.sched.plan import (
    choose_workers,
    estimate_durations,
    fit_startup_and_rate,
    order_files,
    parse_gpus_per_slot,
    parse_shard,
    parse_workers,
    plan_schedule,
    shard_files,
    shard_from_env,
)

FILES = ["a.py", "b.py", "c.py", "d.py", "e.py", "f.py"]
DURATIONS = {"a.py": 1.0, "b.py": 9.0, "c.py": 4.0, "d.py": 4.0, "e.py": 2.0, "f.py": 7.0}


def test_longest_file_first_ties_keep_path_order() -> None:
    assert order_files(FILES, DURATIONS) == ["b.py", "f.py", "c.py", "d.py", "e.py", "a.py"]


def test_without_durations_path_order_is_kept() -> None:
    assert order_files(FILES, {}) == FILES


def test_a_file_without_a_duration_or_a_count_is_placed_by_the_mean() -> None:
    durations = {"a.py": 1.0, "b.py": 9.0}  # mean 5: c.py goes between them
    assert order_files(["a.py", "b.py", "c.py"], durations) == ["b.py", "c.py", "a.py"]


def test_a_first_check_starts_the_file_with_the_most_tests_first() -> None:
    # no earlier run: the last file in path order, with 10x the parametrized tests, first
    counts = dict.fromkeys(FILES, 4) | {"f.py": 40, "c.py": 5}
    assert order_files(FILES, {}, counts) == ["f.py", "c.py", "a.py", "b.py", "d.py", "e.py"]


# 0.8 s of start-up and 0.1 s per test: a.py, b.py and c.py measured, new.py not
KNOWN = {"a.py": 1.0, "b.py": 1.2, "c.py": 2.0}
COUNTS = {"a.py": 2, "b.py": 4, "c.py": 12, "new.py": 40}


def test_a_new_file_is_estimated_from_its_number_of_tests() -> None:
    files = ["a.py", "b.py", "c.py", "new.py"]
    estimates = estimate_durations(files, KNOWN, COUNTS)
    assert estimates == {**KNOWN, "new.py": pytest.approx(0.8 + 0.1 * 40)}
    # the known files' mean (1.4 s) would have started it after c.py
    assert order_files(files, KNOWN, COUNTS) == ["new.py", "c.py", "b.py", "a.py"]
    assert estimate_durations(files, KNOWN, COUNTS | {"new.py": 1})["new.py"] == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("points", "fit"),
    [
        ([], (0.0, 0.0)),
        ([(4, 2.0), (4, 1.0)], (0.0, 0.375)),  # one number of tests: a rate through zero
        ([(0, 3.0)], (3.0, 0.0)),  # no tests to share it: all start-up
        ([(2, 3.0), (10, 1.0)], (2.0, 0.0)),  # more tests, shorter: noise, the mean
        ([(2, 0.1), (4, 1.0)], (0.0, pytest.approx(4.2 / 20))),  # no negative start-up
    ],
)
def test_the_fit_never_goes_negative(
    points: list[tuple[int, float]], fit: tuple[float, float]
) -> None:
    assert fit_startup_and_rate(points) == fit


def test_shards_use_the_same_estimates_as_the_order() -> None:
    files = ["a.py", "b.py", "c.py", "new.py"]
    estimates = estimate_durations(files, KNOWN, COUNTS)
    for index in (1, 2):
        shard = shard_files(files, KNOWN, index, 2, COUNTS)
        assert shard == shard_files(files, estimates, index, 2)
    # new.py (4.8 s estimated) has a shard to itself; by the mean it would have shared one
    assert shard_files(files, KNOWN, 1, 2, COUNTS) == ["new.py"]


def test_without_durations_shards_are_balanced_by_tests() -> None:
    counts = {"a.py": 30, "b.py": 10, "c.py": 10, "d.py": 10}
    files = list(counts)
    assert shard_files(files, {}, 1, 2, counts) == ["a.py"]
    assert shard_files(files, {}, 2, 2, counts) == ["b.py", "c.py", "d.py"]


@pytest.mark.parametrize("total", [1, 2, 3, 4, 7])
def test_shards_cover_every_file_exactly_once(total: int) -> None:
    shards = [shard_files(FILES, DURATIONS, i, total) for i in range(1, total + 1)]
    flat = [f for shard in shards for f in shard]
    assert sorted(flat) == sorted(FILES)
    for shard in shards:  # each shard keeps collection order for its suite run
        assert shard == [f for f in FILES if f in shard]


def test_shards_are_balanced_by_duration() -> None:
    loads = [sum(DURATIONS[f] for f in shard_files(FILES, DURATIONS, i, 3)) for i in (1, 2, 3)]
    assert max(loads) - min(loads) <= 2.0  # 27 s of work: 9 | 7+2 | 4+4+1
    assert sorted(loads) == [9.0, 9.0, 9.0]


def test_shard_planning_is_deterministic() -> None:
    assert shard_files(FILES, DURATIONS, 2, 3) == shard_files(list(FILES), dict(DURATIONS), 2, 3)


@pytest.mark.parametrize(("text", "shard"), [("1/1", (1, 1)), ("2/4", (2, 4))])
def test_parse_shard(text: str, shard: tuple[int, int]) -> None:
    assert parse_shard(text) == shard


@pytest.mark.parametrize("text", ["3/2", "0/2", "a/b", "1", "1/2/3", "-1/2"])
def test_bad_shards_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError, match="--shard"):
        parse_shard(text)


def test_shard_from_gitlab_variables() -> None:
    assert shard_from_env({"CI_NODE_INDEX": "2", "CI_NODE_TOTAL": "5"}) == (2, 5)
    assert shard_from_env({"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "1"}) is None
    assert shard_from_env({}) is None


def test_workers() -> None:
    assert parse_workers("auto") is None
    assert parse_workers("3") == 3
    for bad in ("0", "-2", "x"):
        with pytest.raises(UsageError, match="--workers"):
            parse_workers(bad)


def test_auto_workers_follow_cpus_gpus_and_files() -> None:
    assert choose_workers(None, cpus=16, gpus=1, files=40)[0] == 4
    assert choose_workers(None, cpus=16, gpus=2, files=40)[0] == 8
    assert choose_workers(None, cpus=2, gpus=2, files=40)[0] == 2
    assert choose_workers(None, cpus=8, gpus=0, files=3)[0] == 3
    _, why = choose_workers(None, cpus=16, gpus=1, files=40)
    assert why.startswith("auto: 4") and "16 CPUs" in why
    assert choose_workers(6, cpus=2, gpus=0, files=40) == (6, "6 requested")


def test_parallel_slots_see_every_gpu_rotated() -> None:
    schedule = plan_schedule(
        FILES,
        mode=Mode.PARALLEL,
        durations=DURATIONS,
        serial=frozenset(),
        workers=5,
        gpus=["0", "1"],
    )
    # every slot sees every GPU, the order rotated so that slot k starts at GPU k
    assert schedule.slot_gpus == ("0,1", "1,0", "0,1", "1,0", "0,1")
    assert schedule.pool[0] == "b.py"


def test_serial_files_run_after_the_pool() -> None:
    schedule = plan_schedule(
        FILES,
        mode=Mode.PARALLEL,
        durations=DURATIONS,
        serial=frozenset({"b.py"}),
        workers=2,
        gpus=[],
    )
    assert "b.py" not in schedule.pool
    assert schedule.serial == ("b.py",)
    assert schedule.files[-1] == "b.py"
    assert schedule.slot_gpus == (None, None)


@pytest.mark.parametrize("mode", [Mode.ISOLATED, Mode.SUITE])
def test_serial_modes_keep_collection_order_in_one_slot(mode: Mode) -> None:
    schedule = plan_schedule(
        FILES, mode=mode, durations=DURATIONS, serial=frozenset(), workers=4, gpus=["0", "1"]
    )
    assert schedule.pool == tuple(FILES)
    assert schedule.workers == 1
    assert schedule.slot_gpus == ("0,1",)


def test_serial_modes_see_every_gpu_under_gpus_per_slot() -> None:
    # the plain run's view: windows are for the parallel slots only (tests/test_views.py)
    serial = plan_schedule(
        FILES,
        mode=Mode.SUITE,
        durations={},
        serial=frozenset(),
        workers=1,
        gpus=["0", "1", "2", "3"],
        gpus_per_slot=2,
    )
    assert serial.slot_gpus == ("0,1,2,3",)


@pytest.mark.parametrize("value", [0, -1, 5])
def test_gpus_per_slot_must_fit(value: int) -> None:
    with pytest.raises(UsageError, match="--gpus-per-slot"):
        parse_gpus_per_slot(value, ["0", "1", "2", "3"])
