from device import POOL, allocate


def test_small_batches_fit_under_a_limit():
    POOL["limit"] = 1 << 20  # the planted bug: never reset, so later tests inherit it
    assert len(allocate(1 << 10)) == 1 << 10
