"""Seed: one PYTHONHASHSEED for every interpreter of a check.

Each fresh interpreter hashes strings with its own random seed, so a test parametrized by
iterating a set (`[p for p in {"a", "b"}]`) gets the same id for different parameters in
different interpreters: structlog 26.1.0's `test_e2e[...-parameter_strings34]` failed in
one interpreter and passed in the next, and was called flaky. One seed per check (the
user's PYTHONHASHSEED where set; one per CI pipeline, so that its mode jobs agree; else
drawn once) makes every interpreter of it one plain run, and every printed command says
it.
"""

from __future__ import annotations

import functools
import os
import random

SEED_ENV = "PYTHONHASHSEED"
PIPELINE_ENV = "CI_PIPELINE_ID"  # GitLab's: the same in every job of one pipeline
SEED_RANGE = 4_294_967_295  # Python's: 0 (hash randomization off) to 2**32 - 1


@functools.cache
def hash_seed() -> str:
    """The PYTHONHASHSEED of this command's interpreters."""
    given = os.environ.get(SEED_ENV, "")
    if given:
        return given
    pipeline = os.environ.get(PIPELINE_ENV, "")
    if pipeline.isdigit():
        return str(int(pipeline) % SEED_RANGE + 1)
    return str(random.SystemRandom().randint(1, SEED_RANGE))
