"""A seed's value under the workspace's secret (looper.core.run.seedvalue, issue 48): fixed for a key, a tag and
a number; another key, tag or number gives another; 31 bits; not the number."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from looper.core.run.seedvalue import SEED_BITS, seed_value

KEY = bytes(range(32))


@pytest.mark.parametrize("tag, seed", [("nightly", 0), ("nightly", 1), ("nightly", 7), ("weekend-2", 0), ("t", 10_000)])
def test_a_value_is_31_bits_of_the_hmac_of_the_tag_and_number(tag, seed):
    expected = int.from_bytes(hmac.new(KEY, f"{tag}:{seed}".encode(), hashlib.sha256).digest()[:8], "big") % 2**31
    assert seed_value(KEY, tag, seed) == expected and 0 <= expected < 1 << SEED_BITS


def test_numbers_in_a_row_give_values_in_no_order_and_another_key_other_values():
    values = [seed_value(KEY, "nightly", n) for n in range(12)]  # a baseline's, a look's, the confirmation's
    assert len(set(values)) == 12 and values != sorted(values) and not set(values) & set(range(12))
    assert [seed_value(b"\xff" * 32, "nightly", n) for n in range(12)] != values
    assert [seed_value(KEY, "nightly-2", n) for n in range(12)] != values
