"""The verdict of a check whose collection pytest ended (INTERNALERROR, an interrupt, a hook's
`pytest.exit` before collecting).

Plain pytest runs no test then, and neither does the check: there are no modes to diff.
The verdict still fails, and says pytest's cause where the summary, the report and the
merge-request comment show it, so a broken suite is never mistaken for a green one.
"""

from __future__ import annotations

from gpuci.model import Category, TestVerdict, Verdict

COLLECTION_ID = "[pytest collection]"  # pseudo test: the session pytest ended while collecting
NOT_RUN_WHY = "gpuci ran no mode: plain pytest runs no test after its collection ended so"


def ended_verdict(cause: str, exit_code: int = 1) -> Verdict:
    """A verdict whose one entry is pytest's own, `cause`, and no test run: a failure, or,
    where plain pytest exits 0 (a hook's `pytest.exit(..., returncode=0)`), a warning:
    never a pass, for nothing was checked, and never red where pytest is green."""
    category = Category.NOT_RUN if exit_code == 0 else Category.FAILED
    entry = TestVerdict(
        id=COLLECTION_ID,
        file="",
        category=category,
        outcomes={},
        message=cause,
        notes=(NOT_RUN_WHY,),
    )
    return Verdict(
        verdict="warn" if exit_code == 0 else "fail",
        reasons=(cause,),
        summary={category.value: 1},
        tests=(entry,),
    )
