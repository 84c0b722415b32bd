"""GPU views (issue 40): the plain run's view for the suite and every serial interpreter,
slots spread over every GPU, and a test that needs more GPUs than its slot saw never a
finding of that slot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuci.model import Outcome, TestResult
from gpuci.run.sched.views import (
    first_gpus_note,
    plain_gpus,
    screen_gpus,
    visible_gpus,
    wanting_gpus,
    window_env,
)
from tests.cli_runner import clean_env, gpuci, write_files

FOUR = ("0", "1", "2", "3")


def test_windows_leave_no_gpu_idle() -> None:
    assert visible_gpus(FOUR, 3, 2) == ("0,1", "2,3", "0,1")
    assert visible_gpus(["0", "1", "2"], 3, 2) == ("0,1", "2,0", "1,2")  # GPU 2 used
    assert visible_gpus(["0", "1"], 3, 1) == ("0", "1", "0")
    assert visible_gpus(FOUR, 2) == ("0,1,2,3", "1,2,3,0")
    assert visible_gpus([], 2) == (None, None)


def test_the_suite_slot_sees_what_the_plain_run_sees() -> None:
    # under --gpus-per-slot 1 the suite interpreter still sees both GPUs; the files' slots
    # start on GPU 1, the one the suite does not use first
    assert screen_gpus(["0", "1"], 3, 1, suite=True) == ("0,1", "1", "0")
    assert screen_gpus(["0", "1"], 3, 1, suite=False) == ("0", "1", "0")
    assert screen_gpus(["3", "5"], 2, None, suite=True) == ("3,5", "5,3")
    assert plain_gpus([]) is None


def test_a_latent_order_sees_every_gpu_first_on_one_the_suite_does_not_use() -> None:
    # reversed (slot 1) sees both GPUs, for its multi-GPU tests, the other one first, even
    # where the files' slots have windows of one; the files' slots start after it
    assert screen_gpus(["0", "1"], 4, 1, suite=True, orders=1) == ("0,1", "1,0", "0", "1")
    assert screen_gpus(FOUR, 4, None, suite=True, orders=2) == (
        "0,1,2,3",
        "1,2,3,0",
        "2,3,0,1",
        "3,0,1,2",
    )
    # without the suite interpreter, the first latent order takes slot 0
    assert screen_gpus(["0", "1"], 2, None, suite=False, orders=1) == ("0,1", "1,0")
    # one GPU: shared, as every slot shares it
    assert screen_gpus(["0"], 3, None, suite=True, orders=1) == ("0", "0", "0")


def test_only_a_failure_for_an_unseen_device_in_a_narrower_view_is_set_aside() -> None:
    ordinal = "CUDARuntimeError: cudaErrorInvalidDevice: invalid device ordinal"
    results = [
        TestResult(id="t.py::a", file="t.py", outcome=Outcome.FAILED, message=ordinal),
        TestResult(id="t.py::b", file="t.py", outcome=Outcome.FAILED, message="AssertionError"),
        TestResult(id="t.py::c", file="t.py", outcome=Outcome.PASSED),
    ]
    narrow = wanting_gpus(results, "1", ["0", "1"])
    assert [r.outcome for r in narrow] == [Outcome.NOT_RUN, Outcome.FAILED, Outcome.PASSED]
    assert "CUDA_VISIBLE_DEVICES=1, 1 of the check's 2" in narrow[0].message
    assert ordinal in narrow[0].message
    # every GPU visible: the same failure is the test's own
    assert wanting_gpus(results, "0,1", ["0", "1"]) == results
    assert wanting_gpus(results, None, []) == results


def test_only_a_narrower_window_sets_cupys_gpu_limit() -> None:
    assert window_env("1", ["0", "1"], {}) == {"CUPY_TEST_GPU_LIMIT": "1"}
    assert window_env("0,1", ["0", "1"], {}) == {}
    assert window_env("1", ["0", "1"], {"CUPY_TEST_GPU_LIMIT": "2"}) == {}  # the user's
    assert window_env(None, [], {}) == {}


def test_first_gpus_say_whether_a_pair_met() -> None:
    assert first_gpus_note(["0,1", "0,1"]) == "both sides on GPU 0 first"
    # the victim beside all its candidates at once, every side on its device (out of memory)
    assert first_gpus_note(["1,0", "1,0", "1,0"]) == "all 3 sides on GPU 1 first"
    assert "different GPUs first (1, 0)" in first_gpus_note(["1,0", "0,1"])
    assert first_gpus_note([None, None]) == ""


TWO_GPU_SUITE = {
    # what CUDA says where a test asks for a device its view leaves out
    "test_multi.py": """
        import json, os

        def test_needs_two():
            seen = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
            if len(seen) < 2:
                raise RuntimeError("CUDA error: invalid device ordinal")

        def test_records_view():
            view = [
                os.environ["GPUCI_MODE"],
                os.environ.get("CUDA_VISIBLE_DEVICES"),
                os.environ.get("CUPY_TEST_GPU_LIMIT"),
            ]
            with open(os.environ["VIEWS"], "a") as out:
                out.write(json.dumps(view) + "\\n")
    """,
    "test_single.py": "def test_one():\n    pass\n",
    "test_other.py": "def test_two():\n    pass\n",
}


@pytest.mark.slow
def test_a_multi_gpu_test_under_gpus_per_slot_is_no_finding(tmp_path: Path) -> None:
    suite = write_files(tmp_path / "suite", TWO_GPU_SUITE)
    views = tmp_path / "views.jsonl"
    env = {**clean_env(), "VIEWS": str(views)}
    out = tmp_path / "out"
    args = ("check", ".", "--gpus", "0,1", "--gpus-per-slot", "1", "--workers", "3")
    proc = gpuci(*args, "--out", str(out), cwd=suite, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["verdict"] == "pass"
    seen = [tuple(json.loads(line)) for line in views.read_text().splitlines()]
    assert ("suite", "0,1", None) in seen  # the plain run's view
    assert all(
        view == "0,1" and not limit
        for mode, view, limit in seen
        if mode not in ("parallel", "reversed")
    )
    # reversed (on by default with two GPUs) sees both, the other first, and no limit: its
    # multi-GPU tests run there
    assert {(view, limit) for mode, view, limit in seen if mode == "reversed"} == {("1,0", None)}
    # a window of one GPU tells CuPy's multi-GPU tests to skip there
    assert all(limit == "1" for mode, view, limit in seen if mode == "parallel")
    parallel = json.loads((out / "parallel" / "run.json").read_text())
    multi = next(t for t in parallel["tests"] if t["id"].endswith("test_needs_two"))
    slot_view = next(f["gpu"] for f in parallel["files"] if f["file"] == "test_multi.py")
    assert slot_view in ("0", "1")  # a window of one GPU
    assert multi["outcome"] == "not-run"
    assert "asked for a GPU this slot did not see" in multi["message"]
    assert "invalid device ordinal" in multi["message"]
    file_views = {f["gpu"] for f in parallel["files"]}
    assert file_views == {"0", "1"}  # both GPUs used by the files' slots
