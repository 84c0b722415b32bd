"""The example suite's conftest: it shows where the fake device keeps its state.

It deliberately resets nothing between tests: the pollution is what gpuci must find.
"""

from __future__ import annotations

import fakegpu


def pytest_report_header() -> list[str]:
    """Name the fake device and its state directory at the top of a run."""
    props = fakegpu.device_properties()
    return [f"fakegpu: {props.name}, state in {fakegpu.state_dir()} (FAKEGPU_DIR)"]
