"""What a check records of the machine (`gpuci.run.proc.gpus`): the GPUs, driver and CUDA
version from nvidia-smi, asked once per check however many modes it writes (nvidia-smi
takes tenths of a second on a GPU host, and the last run is written after the screens)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import clean_env, gpuci, write_files

# two GPUs; every call appended to $GPUCI_TEST_CALLS
FAKE_NVIDIA_SMI = """#!/bin/sh
echo "$*" >> "$GPUCI_TEST_CALLS"
case "$*" in
  *--query-gpu=index,uuid*) printf '0, GPU-fake0\\n1, GPU-fake1\\n' ;;
  *--query-gpu=index\\ *|*--query-gpu=index) printf '0\\n1\\n' ;;
  *--query-gpu=name*) printf 'Fake H100, 580.1, 81559 MiB\\nFake H100, 580.1, 81559 MiB\\n' ;;
  *--query-compute-apps=*) ;;
  "") echo "| NVIDIA-SMI 580.1   Driver Version: 580.1   CUDA Version: 13.0 |" ;;
esac
"""


@pytest.mark.slow
def test_the_machine_is_asked_once_however_many_modes_a_check_writes(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI, encoding="utf-8")
    (bin_dir / "nvidia-smi").chmod(0o755)
    calls = tmp_path / "calls.txt"
    root = write_files(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "test_a.py": "def test_a():\n    pass\n",
            "test_b.py": "def test_b():\n    assert False\n",
        },
    )
    env = clean_env()
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    env["GPUCI_TEST_CALLS"] = str(calls)
    modes = ("--modes", "suite,parallel,isolated", "--evidence-budget", "0")
    proc = gpuci("check", ".", "--out", "out", *modes, cwd=root, env=env)
    assert proc.returncode == 1, proc.stderr
    for mode in ("suite", "parallel", "isolated"):
        run = json.loads((root / "out" / mode / "run.json").read_text(encoding="utf-8"))
        facts = {k: run["environment"].get(k) for k in ("gpu", "driver", "cuda")}
        assert facts == {"gpu": "2 x Fake H100", "driver": "580.1", "cuda": "13.0"}, mode
    asked = calls.read_text(encoding="utf-8").splitlines()
    assert sum(a.startswith("--query-gpu=name") for a in asked) == 1, asked
    assert asked.count("") == 1, asked  # the header, for the CUDA version
    assert sum(a.startswith("--query-gpu=index ") for a in asked) <= 1, asked
