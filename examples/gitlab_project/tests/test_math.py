import pytest


@pytest.mark.parametrize("n", [1, 2, 3])
def test_square(n):
    assert n * n == n**2
