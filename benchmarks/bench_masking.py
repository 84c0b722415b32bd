"""Masking's cost: 10 MB of test output, a shortened token at its end, five secrets.

    python benchmarks/bench_masking.py

A benchmark, not a timed test: it prints the seconds each of three texts took (a log of
repeated assertion lines, random letters and digits, the same with the secret's
fragments sprinkled through it). 2026-11-26, this repository's 2-core machine: about
0.33 s for the log, 0.38 s for random text, 0.41 s with fragments through it.
"""

from __future__ import annotations

import random
import string
import time

from gpuci.run.disk.masking import mask_secrets

JOB = "glcbt-64_x9Kq2mZpL0wE"
PAT = "glpat-Ab12-3456-cdEF"
SECRETS = [JOB, PAT, "s3cr3t-v4lue-of-a-ci-variable", "a" * 7 + "Zq0_9-xY" * 8, "hunter22"]
SIZE = 10_000_000


def texts() -> dict[str, str]:
    """The texts to mask, each about SIZE characters."""
    line = "E       AssertionError: assert 'value-0123456789' == 'other' at step 42\n"
    rng = random.Random(7)  # noqa: S311 (text to mask, not a secret)
    noise = "".join(rng.choices(string.ascii_letters + string.digits, k=SIZE))
    sprinkled = "".join(
        noise[i : i + 10_000] + f" '{JOB[:14]}...{PAT[-10:]}' " for i in range(0, SIZE, 10_000)
    )
    return {"log": line * (SIZE // len(line)), "random": noise, "sprinkled": sprinkled}


def main() -> None:
    """Print how long masking each text took."""
    for name, text in texts().items():
        start = time.perf_counter()
        mask_secrets(text, SECRETS)
        print(f"{name:10} {len(text) / 1e6:5.1f} MB  {time.perf_counter() - start:6.2f} s")


if __name__ == "__main__":
    main()
