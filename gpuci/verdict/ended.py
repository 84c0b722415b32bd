"""The verdict of a check whose collection pytest ended red (INTERNALERROR, an interrupt).

Plain pytest runs no test then, and neither does the check: there are no modes to diff.
The verdict still fails, and says pytest's cause where the summary, the report and the
merge-request comment show it, so a broken suite is never mistaken for a green one.
"""

from __future__ import annotations

from gpuci.model import Category, TestVerdict, Verdict

COLLECTION_ID = "[pytest collection]"  # pseudo test: the session pytest ended while collecting
NOT_RUN_WHY = "gpuci ran no mode: plain pytest runs no test after its collection ended so"


def ended_verdict(cause: str) -> Verdict:
    """A failed verdict whose one failure is pytest's own, `cause`, and no test run."""
    failure = TestVerdict(
        id=COLLECTION_ID,
        file="",
        category=Category.FAILED,
        outcomes={},
        message=cause,
        notes=(NOT_RUN_WHY,),
    )
    return Verdict(
        verdict="fail",
        reasons=(cause,),
        summary={Category.FAILED.value: 1},
        tests=(failure,),
    )
