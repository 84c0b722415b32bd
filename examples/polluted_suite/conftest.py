"""The example suite's conftest: it shows where the fake device keeps its state, and lets
an interpreter whose first test is a memory hog say so (`hogs.announce`).

It deliberately resets nothing between tests: the pollution is what gpuci must find.
"""

from __future__ import annotations

import fakegpu
import hogs
import pytest


def pytest_report_header() -> list[str]:
    """Name the fake device and its state directory at the top of a run."""
    props = fakegpu.device_properties()
    return [f"fakegpu: {props.name}, state in {fakegpu.state_dir()} (FAKEGPU_DIR)"]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before any test runs: a hog first in this interpreter contends for the device."""
    hogs.announce(session.items)
