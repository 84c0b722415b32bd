"""Masking: no run of six characters of a secret survives, whatever cut it.

pytest shortens a long string to its two ends (`'glcbt-64_x9...12-3456-cdEF'`), so a
secret reaches gpuci's output in pieces, not only whole; a public prefix (`glpat-`) names
the kind of token and is no secret; a value too short for a piece is masked whole.
"""

from __future__ import annotations

import html
import io
import json
import urllib.parse
from pathlib import Path

from gpuci.run.disk.masking import (
    FRAGMENT_CHARS,
    MASK,
    MaskedStream,
    known_secrets,
    mask_files,
    mask_secrets,
    secret_body,
)

JOB = "glcbt-64_x9Kq2mZpL0wE"  # test tokens, not real ones
PAT = "glpat-Ab12-3456-cdEF"
SECRETS = [JOB, PAT]


def windows(secret: str) -> set[str]:
    """Every run of FRAGMENT_CHARS characters of `secret` past its prefix."""
    body = secret_body(secret)
    return {body[i : i + FRAGMENT_CHARS] for i in range(len(body) + 1 - FRAGMENT_CHARS)}


def leaked(text: str) -> set[str]:
    return {w for s in SECRETS for w in windows(s) if w in text}


def test_both_ends_of_a_shortened_pair_are_masked() -> None:
    text = "AssertionError: assert 'glcbt-64_x9Kq...12-3456-cdEF' == 'x'"
    masked = mask_secrets(text, SECRETS)
    assert masked == f"AssertionError: assert 'glcbt-{MASK}...{MASK}' == 'x'"
    assert not leaked(masked)


def test_a_whole_value_is_masked_prefix_and_all_as_before() -> None:
    assert mask_secrets(f"token {PAT}.", SECRETS) == f"token {MASK}."


def test_the_public_prefix_alone_is_not_masked() -> None:
    text = "tokens start with glpat- or glcbt-64_ and are then random"
    assert mask_secrets(text, SECRETS) == text


def test_overlapping_and_repeated_fragments_leave_nothing_between() -> None:
    # two pieces of one secret that overlap ("q2mZpL0"), then the secret again, and a
    # fragment cut at both ends of the text
    text = "x9Kq2mZpL0 Kq2mZpL0wE|glcbt-64_x9Kq2mZpL0wE|b12-3456-c"
    masked = mask_secrets(text, SECRETS)
    assert masked == f"{MASK} {MASK}|{MASK}|{MASK}"
    assert mask_secrets("2mZpL0wE", SECRETS) == MASK  # at the very end
    assert mask_secrets("64_x9Kq2", SECRETS) == MASK  # at the very start


def test_a_run_of_two_overlapping_pieces_is_one_mask() -> None:
    # "x9Kq2m" and "q2mZpL" overlap in "q2m": no character between them may survive
    assert mask_secrets("~x9Kq2mZpL~", SECRETS) == f"~{MASK}~"


def test_five_characters_survive_six_do_not() -> None:
    assert mask_secrets("Kq2mZ", SECRETS) == "Kq2mZ"
    assert mask_secrets("Kq2mZp", SECRETS) == MASK


def test_escaped_spellings_are_masked_without_cutting_an_escape() -> None:
    secret = "sk-a/b+c&d\"e'f:g"  # noqa: S105
    assert mask_secrets(urllib.parse.quote(secret, safe=""), [secret]) == MASK
    assert mask_secrets(html.escape(secret), [secret]) == MASK
    assert mask_secrets(json.dumps(secret), [secret]) == f'"{MASK}"'
    # a piece of it inside JSON: masked, and the JSON still reads (no escape cut in two)
    masked = mask_secrets(json.dumps({"m": f"{secret[4:]} end"}), [secret])
    assert json.loads(masked) == {"m": f"{MASK} end"}
    assert mask_secrets(html.escape(secret[3:]), [secret]) == MASK


def test_a_secret_shorter_than_a_piece_is_masked_whole_only() -> None:
    short = "glpat-ab1"
    assert mask_secrets(f"a {short} b", [short]) == f"a {MASK} b"
    assert mask_secrets("ab1 and glpat-", [short]) == "ab1 and glpat-"


def test_the_job_token_and_its_other_names_are_known() -> None:
    environ = {"CI_JOB_TOKEN": JOB, "CI_REGISTRY_PASSWORD": "glcbt-1_other0000"}
    assert set(known_secrets(environ, [PAT])) == {JOB, PAT, "glcbt-1_other0000"}
    assert known_secrets({"CI_JOB_TOKEN": "abc"}) == []  # would mask ordinary words


def test_files_are_masked_in_place_keeping_the_rest(tmp_path: Path) -> None:
    log = tmp_path / "suite" / "logs" / "suite.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"\xff raw 12-3456-cdEF bytes\n")
    log.chmod(0o640)
    clean = tmp_path / "clean.txt"
    clean.write_text("nothing here", encoding="utf-8")
    assert mask_files(tmp_path, SECRETS) == [log]
    assert log.read_bytes() == f"\xff raw {MASK} bytes\n".encode("latin-1")
    assert log.stat().st_mode & 0o777 == 0o640
    assert clean.read_text(encoding="utf-8") == "nothing here"
    assert sorted(p.name for p in log.parent.iterdir()) == ["suite.log"]  # no temp left


def test_a_stream_masks_each_write() -> None:
    underneath = io.StringIO()
    stream = MaskedStream(underneath, SECRETS)
    print(f"gpuci:   test_x.py::test[{JOB}]: alone: failed", file=stream)
    assert underneath.getvalue() == f"gpuci:   test_x.py::test[{MASK}]: alone: failed\n"


def test_a_fragment_at_the_end_of_ten_megabytes_is_masked() -> None:
    # how long it takes is a benchmark's (benchmarks/bench_masking.py), not a test's
    line = "E       AssertionError: assert 'value-0123456789' == 'other' at step 42\n"
    text = line * (10_000_000 // len(line)) + f"'{JOB[:14]}...{PAT[-10:]}'"
    masked = mask_secrets(text, [*SECRETS, "a" * 7 + "Zq0_9-xY" * 8])
    assert masked.endswith(f"'glcbt-{MASK}...{MASK}'")
    assert masked[: len(line)] == line
