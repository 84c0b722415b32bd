"""A copy to the host that the test forgets to wait for: a race.

fakegpu makes the race deterministic (it is lost on every other run, counted in
FAKEGPU_DIR), so two alone-reruns of this test always disagree: a flaky test.
"""

from __future__ import annotations

import fakegpu


def test_copy_to_host() -> None:
    values = [1.0, 2.0, 3.0]
    host = fakegpu.copy_to_host_async(fakegpu.asarray(values))  # no synchronize()
    assert host == values
