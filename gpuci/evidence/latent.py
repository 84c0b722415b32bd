"""Latent: a finding that only an order plain pytest did not run shows (`reversed`,
`shuffled:SEED`), and the order that shows it.

The plain run passed such a test: it breaks the day a file is added, renamed, sharded or
shuffled. Its category is the one the orders and alone-runs give (`gpuci.evidence.classify`);
this only says whether every run that showed it ran in a latent order.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuci.evidence.results import ModeResults
from gpuci.model import LATENT_ORDERS, NOT_PASSING, Category, Mode, Outcome
from gpuci.run.sched.modes import order_label

# what a latent order can show: a culprit or a provider collected after the test, or an
# interpreter that died (or hung) only after the tests it ran first there
LATENT_CATEGORIES = frozenset(
    {Category.ORDER_DEPENDENT, Category.DEPENDS_ON_OTHERS, Category.CRASHED, Category.TIMED_OUT}
)


def latent_order(category: Category, outcomes: Mapping[Mode, Outcome]) -> Mode | None:
    """The latent order that alone shows the finding (`outcomes` as the modes ran them,
    none inferred), or None where a mode plain pytest's order runs (suite, isolated,
    parallel, threads) shows it too, or nothing latent does."""
    if category not in LATENT_CATEGORIES:
        return None
    shown: set[Mode]
    if category is Category.DEPENDS_ON_OTHERS:  # shown by passing after others
        # a pass in threads clears only thread-unsafety (classify_test)
        shown = {m for m, o in outcomes.items() if o is Outcome.PASSED and m is not Mode.THREADS}
    elif category is Category.ORDER_DEPENDENT:
        shown = {m for m, o in outcomes.items() if o in NOT_PASSING}
    else:
        shown = {m for m, o in outcomes.items() if o is Outcome(category.value)}
    latent = [m for m in LATENT_ORDERS if m in shown]
    if not latent or shown - set(LATENT_ORDERS):
        return None
    return latent[0]


def found_in(
    category: Category, outcomes: Mapping[Mode, Outcome], results: Mapping[Mode, ModeResults]
) -> str:
    """The latent order a finding was found in, as `--modes` names it (`reversed`,
    `shuffled:SEED`); "" where plain pytest's orders show it."""
    mode = latent_order(category, outcomes)
    if mode is None or mode not in results:
        return ""
    return order_label(mode, results[mode].run.shuffle_seed)


def latent_note(order: str, category: Category) -> tuple[str, ...]:
    """What a latent finding's report, note and terminal lines say of it."""
    if not order:
        return ()
    policy = "it warns unless --fail-on names latent or its category"
    if category is Category.DEPENDS_ON_OTHERS:
        return (
            f"latent: passes only in the {order} order, which plain pytest did not run: its"
            f" provider is collected after it; {policy}",
        )
    return (
        f"latent: found in the {order} order, which plain pytest did not run (the plain"
        f" order passed it); {policy}",
    )
