"""Notes: the words a search's note and a run's record begin with, where more than one
kind of evidence writes or reads them (the strict confirmation and the verdict read them
too), so that each is spelled once."""

from __future__ import annotations

NOT_SEARCHED = "not searched (budget)"
NOT_REPRODUCED = "not reproduced"  # how a search that never saw the finding again begins
PAIRED = "pair: "  # how a search that found a co-running file begins
SAME_RUN_BOTH_WAYS = "flaky: the same run went both ways"  # identical runs, both outcomes
# a pair run whose sides never all reached their first tests, or whose victim never ran:
# it asked nothing (its Probe's kind), and runs once more, as it was
UNASKED = "sides apart"
# a pair run in which one side passed and the other failed its way: contention is
# symmetric, so the run shows the finding for both (each one's claim's failing half)
OTHER_SIDE_FAILED = "the other side failed its way"
