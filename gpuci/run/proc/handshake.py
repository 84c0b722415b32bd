"""The names by which gpuci and the interpreters it holds or pairs talk: read on both sides.

gpuci itself imports these, the plugin's waits (`gpuci.run.proc.waits`) act on them: kept
apart so that gpuci, which starts the suite interpreter first thing, never imports pytest.
"""

from __future__ import annotations

RENDEZVOUS_ENV = "GPUCI_RENDEZVOUS"  # "FOLDER:N": hold the first test until N arrived
RENDEZVOUS_WAIT_S = 60.0  # a partner that never gets there does not hold the other forever
POLL_S = 0.01  # how often a waiting side looks again
HOLD_ENV = "GPUCI_HOLD"  # "1": hold after collection until GPUCI_ONLY's file appears
